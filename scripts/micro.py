"""Device micro-benchmarks behind the GPU results, runnable on any device (the parts: micro_packing.py,
micro_decode.py, micro_common.py):

1. shared-prompt attention: one trainer step (forward + backward of the response log-probs of one
   GRPO group, P prompt tokens, G responses of R) unpacked vs packed, per packed layout, against the
   token ratio G(P+R)/(P+GR); and packed == unpacked log-probs and gradients in fp32 and bf16;
2. decode (micro_decode.py): the built-in sampler's decode step (eager; on CUDA also replayed as CUDA
   graphs) against HF `generate` on the same model, batch and lengths: tokens/s, step time, operators
   dispatched per step and per layer, graph replays per step, and the bandwidth floor.

    python scripts/micro.py --device cuda --model configs/models/qwen2.5-0.5b.json --out micro.json
    python scripts/micro.py --only sampler --model tiny --dtype float32 --batches 1,8,64  # CPU, tiny model
    python scripts/micro.py --only packing --shapes 0.5b-p512,7b-layer-cpu --layers 1  # CPU, named shapes

Prints one line per measurement and writes everything as JSON. Times are medians over --rounds after
--warmup rounds, with the device synchronised around each one. The model is randomly initialised from
the config JSON (seed 0): the shapes and FLOPs are real, the weights are not.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import micro_packing
from micro_common import use_tree
from micro_decode import sampler_bench, summary
from micro_packing import equivalence


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="configs/models/qwen2.5-0.5b.json",
                    help="a model config JSON, or 'tiny' (the tiny model's shape; sampler only)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--P", type=int, default=512)
    ap.add_argument("--R", type=int, default=128)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--batches", default="1,8,64,128", help="sampler batch sizes, comma-separated")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", default="packing,equivalence,sampler")
    ap.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    ap.add_argument("--tree", type=Path, help="import rlbench from this source tree (a worktree of another "
                    "commit: before/after in one run) instead of the installed one")
    ap.add_argument("--out", type=Path)
    micro_packing.add_arguments(ap)  # --shapes, --layers, --vocab, --layouts
    a = ap.parse_args(argv)
    if a.tree:
        use_tree(a.tree)
    if a.threads:
        torch.set_num_threads(a.threads)
    from rlbench.core.devices.device import resolve

    kind, _, index = a.device.partition(":")
    device = resolve(kind, int(index) if index else None)
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[a.dtype]
    only = set(a.only.split(","))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    import rlbench

    res: dict = {"device": name, "torch": torch.__version__, "model": str(a.model),
                 "rlbench": str(Path(rlbench.__file__).parent.parent)}

    def save():
        if a.out:
            a.out.write_text(json.dumps(res, indent=2))

    if "packing" in only:
        res["packing"] = []  # one entry per shape
        for shape in micro_packing.shapes_of(a):
            res["packing"] += micro_packing.run(a, device, dtype, [shape])
            print("packing", json.dumps(res["packing"][-1]), flush=True)
            save()
    if "equivalence" in only:
        res["equivalence"] = {str(d).removeprefix("torch."): equivalence(a.model, device, d, a.P, a.R, a.G, a.layers, a.vocab)
                              for d in (torch.float32, torch.bfloat16)}
        print("equivalence", json.dumps(res["equivalence"]), flush=True)
        save()
    if "sampler" in only:
        res["sampler"] = []
        for b in [int(x) for x in a.batches.split(",")]:
            res["sampler"].append(sampler_bench(a.model, device, dtype, b, a.prompt_len, a.new_tokens,
                                                max(1, a.rounds // 2), 1, layers=a.layers))
            print(summary(res["sampler"][-1]), flush=True)
            save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
