"""The no-grad log-prob pass of one model, with its weights requiring grad (the policy: the old_logprob
stage) and without (the reference model, frozen: the ref_logprob stage), each layout of the trainer:

    python scripts/micro_refpass.py --model configs/models/qwen2.5-0.5b.json --dtype bfloat16 [--tree OLD]

The same weights, the same group (G responses of R tokens after a P-token prompt), the same computation:
only `requires_grad` of the parameters differs, which the passes do not use (they run under no_grad).
Equal seconds are expected; a ratio far from 1 is an operator that takes another path for a frozen weight
(engines/trainer/packing.py says which one did). `--tree OLD` imports rlbench from another source tree
(e.g. a worktree of an older commit): before and after on the same machine in the same minutes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from micro_common import build, group, timed, use_tree

LAYOUTS = ("unpacked", "dense")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="configs/models/qwen2.5-0.5b.json", help="a model config JSON, or 'tiny'")
    ap.add_argument("--layers", type=int, help="decoder layers kept (default: the config's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--P", type=int, default=100)
    ap.add_argument("--R", type=int, default=8)
    ap.add_argument("--G", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", type=Path, help="import rlbench from this source tree (before/after in one run)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.tree:
        use_tree(a.tree)
    from rlbench.core.devices.device import resolve, set_threads
    from rlbench.engines.trainer.packing import unpacked_logprobs
    from rlbench.engines.trainer.packing_dense import packed_logprobs_dense

    set_threads(1)  # one core, as a worker holds it
    device = resolve(a.device)
    model = build(a.model, getattr(torch, a.dtype), device, layers=a.layers).eval()
    prompt, responses = group(model.config.vocab_size, a.P, a.R, a.G)
    fns = {"unpacked": unpacked_logprobs, "dense": packed_logprobs_dense}
    out = {"model": str(a.model), "dtype": a.dtype, "device": str(device), "P": a.P, "R": a.R, "G": a.G,
           "tree": str(a.tree or "this checkout"), "seconds": {}}
    print(f"no-grad log-prob pass, {a.model} {a.dtype} on {device}, P={a.P} R={a.R} G={a.G} "
          f"({out['tree']}); median of {a.rounds}")
    print(f"{'layout':10s} {'policy (grad) s':>16s} {'reference (frozen) s':>21s} {'frozen/policy':>14s}")
    for layout in LAYOUTS:
        row = {}
        for name, grad in (("policy", True), ("reference", False)):
            model.requires_grad_(grad)

            def step(fn=fns[layout]):
                with torch.no_grad():
                    fn(model, prompt, responses, 1.0)

            row[name] = timed(step, device, a.rounds, warmup=1)
        out["seconds"][layout] = row
        print(f"{layout:10s} {row['policy']:16.3f} {row['reference']:21.3f} {row['reference'] / row['policy']:13.2f}x")
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
