"""Shared-prompt attention micro-benchmark (scripts/micro.py --only packing,equivalence): one trainer step
(forward + backward of the response log-probs of one GRPO group, P prompt tokens, G responses of R)
unpacked vs packed, per packed layout, against the token ratio G(P+R)/(P+GR); and packed == unpacked
log-probs and gradients."""
from __future__ import annotations

from pathlib import Path

import torch

from micro_common import build, group, timed


def layouts(device) -> dict:
    from rlbench.engines.trainer import packing

    out = {"unpacked": packing.unpacked_logprobs, "shared_prompt": packing.packed_logprobs,
           "mask4d": packing.packed_logprobs_mask4d}
    if device.type == "cuda":  # FlexAttention has a backward on CUDA only
        out["flex"] = packing.packed_logprobs_flex
    return out


def packing_bench(model_json: Path, device, dtype, P: int, R: int, G: int, rounds: int, warmup: int) -> dict:
    """Train-step seconds per layout and speedup over unpacked; theory = token ratio."""
    from rlbench.engines.trainer.packing import theoretical_speedup

    model = build(model_json, dtype, device).train()
    prompt, responses = group(model.config.vocab_size, P, R, G)

    def step(fn):
        def run():
            model.zero_grad(set_to_none=True)
            torch.stack([lp.sum() for lp in fn(model, prompt, responses)]).sum().backward()
        return run

    result = {"P": P, "R": R, "G": G, "dtype": str(dtype).removeprefix("torch."),
              "theoretical": theoretical_speedup(P, R, G), "seconds": {}, "errors": {}}
    for name, fn in layouts(device).items():
        try:
            result["seconds"][name] = timed(step(fn), device, rounds, warmup)
        except Exception as e:  # noqa: BLE001 - one layout failing must not hide the others' numbers
            result["errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"
    base = result["seconds"].get("unpacked")
    result["speedup"] = {k: base / v for k, v in result["seconds"].items() if base and k != "unpacked"}
    return result


def equivalence(model_json: Path, device, dtype, P: int, R: int, G: int) -> dict:
    """Max |packed - unpacked| of the log-probs and max relative gradient difference, per packed layout.

    Responses of unequal length (R, R-1, ...) so padding is exercised."""
    model = build(model_json, dtype, device).train()
    prompt, responses = group(model.config.vocab_size, P, R, G, seed=1)
    responses = [r[: max(1, R - i)] for i, r in enumerate(responses)]

    def run(fn):
        model.zero_grad(set_to_none=True)
        lps = fn(model, prompt, responses)
        torch.stack([lp.sum() for lp in lps]).sum().backward()
        grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        return torch.cat([lp.detach().float() for lp in lps]), grads

    fns = layouts(device)
    ref_lp, ref_g = run(fns.pop("unpacked"))
    out = {}
    for name, fn in fns.items():
        try:
            lp, g = run(fn)
            out[name] = {"max_abs_logprob": (lp - ref_lp).abs().max().item(),
                         "rel_grad": ((g - ref_g).norm() / ref_g.norm()).item()}
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


