"""The update's peak memory with the chosen tokens' log-probs computed in slices of positions
(engines/trainer/chosen_logprobs.py) against the whole [tokens x vocabulary] logits at once:

    python scripts/micro_logprob_memory.py --model configs/models/qwen2.5-0.5b.json --layers 2 --out m.json

One GRPO group (G responses of R tokens after a P-token prompt, the trainer's unpacked layout), each way:
the update (forward + backward of the responses' log-prob sum, with grad) and the no-grad pass of the old
and reference log-probs. For each: the peak memory above what was in use before it (scripts/micro_packing.py
`_peak`: peak RSS on CPU, the caching allocator's peak on CUDA), its seconds, and the largest difference
of the log-probs between the two ways. "whole" is the code before slicing (every position's logits in one
piece: the budget set past any size); "sliced" the default budget. The model is randomly initialised (seed
0) from the config JSON; `--layers` keeps the first few of its decoder layers (the logits do not depend on
them, the other activations do: the same for both ways).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from micro_common import build, group
from micro_packing import MEMORY_METHOD, _peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="configs/models/qwen2.5-0.5b.json")
    ap.add_argument("--layers", type=int, help="decoder layers kept (default: the config's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--P", type=int, default=128)
    ap.add_argument("--R", type=int, default=384)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    from rlbench.core.devices.device import resolve
    from rlbench.engines.trainer import chosen_logprobs as chosen
    from rlbench.engines.trainer.packing import unpacked_logprobs

    device = resolve(a.device)
    model = build(a.model, getattr(torch, a.dtype), device, layers=a.layers).train()
    vocab = model.config.vocab_size
    prompt, responses = group(vocab, a.P, a.R, a.G)
    default_budget = chosen.LOGITS_BUDGET_BYTES
    out = {"model": str(a.model), "layers": model.config.num_hidden_layers, "dtype": a.dtype,
           "device": str(device), "P": a.P, "R": a.R, "G": a.G, "vocab": vocab,
           "fp32_logits_bytes": a.G * (a.R + 1) * vocab * 4, "slice_rows": chosen.slice_rows(vocab),
           "memory_method": MEMORY_METHOD[device.type == "cuda"], "runs": {}}
    logps = {}
    for name, budget in (("whole", 2**62), ("sliced", default_budget)):
        chosen.LOGITS_BUDGET_BYTES = budget
        row = {}
        for kind, grad in (("update", True), ("no_grad", False)):
            def step(grad=grad, kind=kind):
                with torch.set_grad_enabled(grad):
                    lp = unpacked_logprobs(model, prompt, responses)
                    if grad:
                        torch.stack([x.sum() for x in lp]).sum().backward()
                logps[(name, kind)] = torch.cat([x.detach().float() for x in lp])
            t0 = time.perf_counter()
            peak = _peak(step, device, model)
            row[kind] = {"peak_bytes": peak, "seconds": time.perf_counter() - t0}
            print(f"{name:6s} {kind:8s} peak {peak / 2**20:8.0f} MiB  {row[kind]['seconds']:6.2f} s", flush=True)
        out["runs"][name] = row
    chosen.LOGITS_BUDGET_BYTES = default_budget
    out["max_abs_diff"] = {k: float((logps[("sliced", k)] - logps[("whole", k)]).abs().max())
                           for k in ("update", "no_grad")}
    print(json.dumps(out["max_abs_diff"]))
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
