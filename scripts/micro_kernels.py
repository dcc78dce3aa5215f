"""Kernels per trainer pass, eager against `engine.compile` (compile_model): how many kernels one GRPO group's
log-prob pass runs, in training (forward + backward) and without grad (the old and reference passes), on
each of the trainer's paths: HF's forward of unpacked rows (`unpacked`), the shared-prompt packed layout
(`packed`) and a token-budget stream (`varlen`: the group's responses as documents of their own and the
group as one, as train.micro_batch_tokens packs them). Per layer: the same at two layer counts, their
difference over the layers between. Each compiled pass is checked against the eager one (log-probs and
gradients, fp32) before it is counted.

    python scripts/micro_kernels.py --model tiny --layers 2,4 [--tree OLD]
    python scripts/micro_kernels.py --model configs/models/qwen2.5-0.5b.json --vocab 4096 --layers 2,4

A GPU counts the kernels it runs (micro_common.count_kernels); on the CPU the count is the lowest
operators that do work plus inductor's fused kernels: what a GPU would launch one by one, whatever each
costs here.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

from micro_common import build, count_kernels, use_tree

PATHS = ("unpacked", "packed", "varlen")


def passes(model, prompt: list[int], responses: list[list[int]]):
    """name -> fn(model) -> the group's log-probs on that path."""
    from rlbench.engines.trainer.packing import packed_logprobs, unpacked_logprobs
    from rlbench.engines.trainer.packing_varlen import Document, varlen_logprobs

    return {"unpacked": lambda m: unpacked_logprobs(m, prompt, responses),
            "packed": lambda m: packed_logprobs(m, prompt, responses),
            "varlen": lambda m: varlen_logprobs(m, [Document(prompt, [r]) for r in responses]
                                                + [Document(prompt, responses)])}


def run(fn, model, grad: bool):
    """One pass; with grad, its backward of the summed log-probs too. -> (log-probs, gradients)."""
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grad):
        lps = fn(model)
    if grad:
        torch.stack([lp.sum() for lp in lps]).sum().backward()
    return [lp.detach() for lp in lps], {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def measure(model_json: str, layers: int, device, dtype, prompt_len: int, lengths: list[int],
            vocab: int | None) -> dict:
    """{path: {train_eager, train_compiled, nograd_eager, nograd_compiled}} kernels at `layers` layers."""
    from rlbench.engines.model.compiled import compile_model

    eager = build(model_json, dtype, device, layers=layers, **({"vocab_size": vocab} if vocab else {}))
    compiled = copy.deepcopy(eager)
    compile_model(compiled)
    V = eager.config.vocab_size
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, V, (prompt_len,), generator=g).tolist()
    responses = [torch.randint(3, V, (n,), generator=g).tolist() for n in lengths]
    out = {}
    for name, fn in passes(eager, prompt, responses).items():
        (a_lp, a_g), (b_lp, b_g) = run(fn, compiled, True), run(fn, eager, True)
        run(fn, compiled, False)  # compiled without grad: its own graphs, compiled here, not counted
        for a, b in zip(a_lp, b_lp):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        for n, b in b_g.items():
            torch.testing.assert_close(a_g[n], b, rtol=1e-4, atol=1e-4 * b.abs().max().item(), msg=n)
        out[name] = {f"{mode}_{kind}": count_kernels(lambda m=m, grad=grad: run(fn, m, grad), device)
                     for mode, grad in (("train", True), ("nograd", False))
                     for kind, m in (("eager", eager), ("compiled", compiled))}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny", help="a model config JSON, or 'tiny'")
    ap.add_argument("--layers", default="2,4", help="two layer counts, comma-separated")
    ap.add_argument("--vocab", type=int, help="vocabulary size instead of the config's (a smaller head)")
    ap.add_argument("--prompt-len", type=int, default=9)
    ap.add_argument("--responses", default="5,2,8", help="the group's response lengths, comma-separated")
    ap.add_argument("--tree", type=Path, help="import rlbench from this source tree (before/after in one run)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.tree:
        use_tree(a.tree)
    lo, hi = (int(x) for x in a.layers.split(","))
    lengths = [int(x) for x in a.responses.split(",")]
    device = torch.device("cpu")
    counts = {n: measure(a.model, n, device, torch.float32, a.prompt_len, lengths, a.vocab) for n in (lo, hi)}
    print(f"kernels per pass of one group (prompt {a.prompt_len}, responses {lengths}); per layer from "
          f"{lo} and {hi} layers")
    print(f"{'path':10s} {'pass':8s} {'eager':>7s} {'compiled':>9s} {'eager/layer':>12s} {'compiled/layer':>15s}")
    for path in PATHS:
        for mode in ("train", "nograd"):
            e, c = (counts[lo][path][f"{mode}_{k}"] for k in ("eager", "compiled"))
            pe, pc = ((counts[hi][path][f"{mode}_{k}"] - counts[lo][path][f"{mode}_{k}"]) / (hi - lo)
                      for k in ("eager", "compiled"))
            print(f"{path:10s} {mode:8s} {e:7d} {c:9d} {pe:12.1f} {pc:15.1f}")
    if a.out:
        a.out.write_text(json.dumps({"model": a.model, "layers": [lo, hi], "counts": counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
