"""Device micro-benchmarks behind the GPU results (issue 17), runnable on any device:

1. shared-prompt attention: one trainer step (forward + backward of the response log-probs of one
   GRPO group, P prompt tokens, G responses of R) unpacked vs packed, per packed layout, against the
   token ratio G(P+R)/(P+GR); and packed == unpacked log-probs and gradients in fp32 and bf16;
2. the built-in sampler's decode tok/s against HF `generate` on the same model, batch and lengths.

    python scripts/micro.py --device cuda --model configs/models/qwen2.5-0.5b.json --out micro.json

Prints one line per measurement and writes everything as JSON. Times are medians over --rounds after
--warmup rounds, with the device synchronised around each one. The model is randomly initialised from
the config JSON (seed 0): the shapes and FLOPs are real, the weights are not.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch


def build(model_json: Path, dtype: torch.dtype, device: torch.device, attn: str = "sdpa"):
    from transformers import AutoConfig, AutoModelForCausalLM

    values = {k: v for k, v in json.loads(model_json.read_text()).items() if not k.startswith("_")}
    cfg = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)


def timed(fn, device, rounds: int, warmup: int) -> float:
    """Median seconds of fn() over `rounds` after `warmup` calls, the device synchronised around each."""
    from rlbench.core.devices.device import synchronize

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        synchronize(device)
        t = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _group(vocab: int, P: int, R: int, G: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab, (P,), generator=g).tolist()
    return prompt, [torch.randint(0, vocab, (R,), generator=g).tolist() for _ in range(G)]


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
    prompt, responses = _group(model.config.vocab_size, P, R, G)

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
    prompt, responses = _group(model.config.vocab_size, P, R, G, seed=1)
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


def sampler_bench(model_json: Path, device, dtype, batch: int, prompt_len: int, new_tokens: int,
                  rounds: int, warmup: int) -> dict:
    """Decode tok/s of the built-in sampler vs HF generate: `batch` sequences, all `new_tokens` long."""
    from rlbench.engines.rollout.base import PromptRequest
    from rlbench.engines.rollout.sampler import BuiltinSampler
    from rlbench.engines.rollout.sampling import LengthSampling

    model = build(model_json, dtype, device).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(2)
    prompts = torch.randint(0, vocab, (batch, prompt_len), generator=g)
    sampler = BuiltinSampler(model, eos_token_id=vocab - 1, max_num_seqs=batch, device=device)
    sp = LengthSampling(n=1, max_new_tokens=new_tokens, response_length="fixed",
                        response_length_mean=new_tokens)
    requests = [PromptRequest(i, p.tolist()) for i, p in enumerate(prompts)]
    builtin = timed(lambda: sampler.generate(requests, sp), device, rounds, warmup)
    ids = prompts.to(device)

    def hf():
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
    hf_s = timed(hf, device, rounds, warmup)
    tokens = batch * new_tokens
    return {"batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens,
            "builtin_tok_s": tokens / builtin, "hf_generate_tok_s": tokens / hf_s,
            "builtin_over_hf": hf_s / builtin}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", type=Path, default=Path("configs/models/qwen2.5-0.5b.json"))
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
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    from rlbench.core.devices.device import resolve

    kind, _, index = a.device.partition(":")
    device = resolve(kind, int(index) if index else None)
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[a.dtype]
    only = set(a.only.split(","))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    res: dict = {"device": name, "torch": torch.__version__, "model": str(a.model)}

    def save():
        if a.out:
            a.out.write_text(json.dumps(res, indent=2))

    if "packing" in only:
        res["packing"] = packing_bench(a.model, device, dtype, a.P, a.R, a.G, a.rounds, a.warmup)
        print("packing", json.dumps(res["packing"]), flush=True)
        save()
    if "equivalence" in only:
        res["equivalence"] = {str(d).removeprefix("torch."): equivalence(a.model, device, d, a.P, a.R, a.G)
                              for d in (torch.float32, torch.bfloat16)}
        print("equivalence", json.dumps(res["equivalence"]), flush=True)
        save()
    if "sampler" in only:
        res["sampler"] = []
        for b in [int(x) for x in a.batches.split(",")]:
            res["sampler"].append(sampler_bench(a.model, device, dtype, b, a.prompt_len, a.new_tokens,
                                                max(1, a.rounds // 2), 1))
            print("sampler", json.dumps(res["sampler"][-1]), flush=True)
            save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
