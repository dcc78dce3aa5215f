"""Decode micro-benchmark (scripts/micro.py --only sampler): the built-in sampler's decode tok/s against
HF `generate` on the same model, batch and lengths."""
from __future__ import annotations

from pathlib import Path

import torch

from micro_common import build, timed


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


