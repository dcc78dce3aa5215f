"""Micro-benchmarks of rlbench's hot kernels (pytest-benchmark).

The file name (bench_*.py) keeps it out of the default `pytest` run. Run it with:

    .venv/bin/pytest tests/benchmarks/bench_kernels.py --benchmark-only --benchmark-json=bench.json

Parts that may not exist yet (the built-in sampler, shared-prompt packing) are imported inside the
benchmark and skipped with the reason when the import fails. Sizes follow the CPU default config
(tiny Qwen2 model, G=4, 32 sequences in flight). Every benchmark records its sizes in extra_info, so
bench.json is self-describing.
"""
from __future__ import annotations

import copy
import importlib

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.benchmark

SEQS, PROMPT_LEN, NEW_TOKENS = 32, 48, 16  # in-flight sequences, prompt tokens, tokens per generate


def _import(module: str):
    """The module, or skip the benchmark saying what is missing (someone may still be writing it)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{module} is not importable yet: {e}")


@pytest.fixture(scope="module")
def tiny():
    """(model, vocab size): the CPU default's tiny Qwen2 model, randomly initialised, eval mode."""
    from rlbench.core.config import ModelConfig
    from rlbench.engines.model.tiny import build_tiny
    from rlbench.engines.model.tokenizer import CharTokenizer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    vocab = CharTokenizer().vocab_size
    return build_tiny(ModelConfig(), vocab, seed=0), vocab


def test_sampler_generate(benchmark, tiny):
    """BuiltinSampler.generate: prefill + NEW_TOKENS decode steps for SEQS sequences (8 prompts x G=4)."""
    sampler_mod = _import("rlbench.engines.rollout.sampler")
    from rlbench.engines.rollout.base import PromptRequest, SamplingParams

    model, vocab = tiny
    # eos id outside the vocabulary: every sequence runs the full NEW_TOKENS steps, so rounds compare
    sampler = sampler_mod.BuiltinSampler(copy.deepcopy(model), vocab + 1, max_num_seqs=SEQS,
                                         device=torch.device("cpu"))
    sampler.load_weights({n: p.detach() for n, p in model.named_parameters()}, 0)
    g = torch.Generator().manual_seed(0)
    requests = [PromptRequest(i, torch.randint(3, vocab, (PROMPT_LEN,), generator=g).tolist())
                for i in range(SEQS // 4)]
    sampling = SamplingParams(n=4, max_new_tokens=NEW_TOKENS, seed=0)
    benchmark.extra_info.update(sequences=SEQS, prompt_len=PROMPT_LEN, decode_steps=NEW_TOKENS)
    benchmark.pedantic(sampler.generate, args=(requests, sampling), rounds=5, warmup_rounds=1)


def test_model_decode_step(benchmark, tiny):
    """One KV-cache decode step of the tiny model, [SEQS, 1] tokens (the sampler's inner kernel)."""
    model, vocab = tiny
    ids = torch.randint(3, vocab, (SEQS, PROMPT_LEN), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    cache, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)  # nxt: [SEQS, 1]

    def step():
        with torch.no_grad():
            logits = model(input_ids=nxt, past_key_values=cache, use_cache=True).logits
        cache.crop(-1)  # the step appended one position: drop it so every round is the same
        return logits

    benchmark.extra_info.update(sequences=SEQS, context=PROMPT_LEN)
    benchmark(step)


@pytest.mark.parametrize("size", ["tiny", "64MiB"])
def test_weight_sync(benchmark, tiny, size):
    """Copy a state dict into shared-memory tensors, as ProcessRolloutPool.publish does each iteration."""
    if size == "tiny":
        state = {n: p.detach().clone() for n, p in tiny[0].named_parameters()}
    else:  # a model-sized copy: 16 x [1024, 1024] fp32
        state = {f"layers.{i}.weight": torch.randn(1024, 1024) for i in range(16)}
    shared = {n: torch.empty_like(t).share_memory_() for n, t in state.items()}

    def sync():
        with torch.no_grad():
            for n, t in state.items():
                shared[n].copy_(t)

    benchmark.extra_info["bytes"] = sum(t.numel() * t.element_size() for t in state.values())
    benchmark(sync)


def test_grpo_loss(benchmark):
    """token_sum_loss forward + backward on a [32, 128] batch (32 sequences x 128 response tokens)."""
    from rlbench.engines.trainer.grpo import token_sum_loss

    B, R = 32, 128
    g = torch.Generator().manual_seed(0)
    logp = (-1.0 + 0.1 * torch.randn(B, R, generator=g)).requires_grad_()  # [B, R]
    old_logp = logp.detach() + 0.01 * torch.randn(B, R, generator=g)  # [B, R]
    ref_logp = logp.detach() + 0.05 * torch.randn(B, R, generator=g)  # [B, R]
    adv = torch.randn(B, generator=g)  # [B]
    lengths = torch.randint(R // 4, R + 1, (B,), generator=g)
    mask = (torch.arange(R)[None, :] < lengths[:, None]).float()  # [B, R] right padding

    def step():
        logp.grad = None
        loss, _ = token_sum_loss(logp, old_logp, ref_logp, adv, mask, clip=0.2, kl_coef=0.001)
        loss.backward()

    benchmark.extra_info.update(batch=B, response_len=R)
    benchmark(step)


@pytest.mark.parametrize("variant", ["unpacked_logprobs", "packed_logprobs", "packed_logprobs_mask4d"])
def test_group_logprobs(benchmark, tiny, variant):
    """One GRPO group (P=64, G=4, R=16..64) through the model, forward + backward, packed vs unpacked."""
    packing = _import("rlbench.engines.trainer.packing")
    fn = getattr(packing, variant, None)
    if fn is None:
        pytest.skip(f"rlbench.engines.trainer.packing has no {variant} yet")
    model, vocab = tiny
    model = copy.deepcopy(model).train()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (64,), generator=g).tolist()
    responses = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (16, 32, 48, 64)]

    def step():
        model.zero_grad(set_to_none=True)
        torch.cat(fn(model, prompt, responses)).sum().backward()

    benchmark.extra_info.update(prompt_len=64, response_lens=[16, 32, 48, 64])
    benchmark(step)
