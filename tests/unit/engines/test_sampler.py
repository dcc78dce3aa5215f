"""The built-in sampler: its forward equals HF's, sampling is seeded per sample and batch-invariant,
groups stream out as they finish."""
import pytest
import torch
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

from rlbench.engines.rollout.base import PromptRequest, SamplingParams
from rlbench.engines.rollout.sampler import BuiltinSampler
from rlbench.engines.rollout.sampling import top_p_sample, sample_seed

V = 64
NO_EOS = V  # a token id the model never emits


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(arch: str = "qwen2", seed: int = 0, heads: int = 4, kv_heads: int = 2):
    cfg_cls, model_cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM),
                          "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[arch]  # qwen3: per-head q/k norm
    # initializer_range wider than the default 0.02: varied, input-dependent tokens instead of one repeated token
    cfg = cfg_cls(vocab_size=V, hidden_size=16 * heads, num_hidden_layers=2, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, intermediate_size=128, max_position_embeddings=256,
                  tie_word_embeddings=False, initializer_range=0.2)
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    if arch == "qwen2":  # random init leaves q/k/v biases at zero; make them count
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.2)
    return model


def prompts(k: int, seed: int = 1, lo: int = 3, hi: int = 12) -> list[PromptRequest]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (k,), generator=g).tolist()
    return [PromptRequest(i, torch.randint(0, V, (n,), generator=g).tolist()) for i, n in enumerate(lens)]


def by_index(groups):
    return {g.prompt_index: g for g in groups}


@pytest.mark.parametrize("arch,heads,kv_heads", [("qwen2", 4, 2), ("llama", 4, 2), ("llama", 6, 2), ("qwen2", 4, 4),
                                                   ("qwen3", 4, 2)])
def test_prefill_and_incremental_logits_match_hf(arch, heads, kv_heads):
    model = tiny(arch, heads=heads, kv_heads=kv_heads)  # GQA with 2 and 3 query heads per kv head, and MHA
    ids = torch.randint(0, V, (24,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0]  # [T, V]
    sampler = BuiltinSampler(model, NO_EOS, max_num_seqs=4)
    for prefill_len in (1, 9, 24):
        torch.testing.assert_close(sampler.debug_logits(ids, prefill_len), ref, atol=1e-5, rtol=1e-5)


def test_logits_match_hf_whatever_the_memory_order_attention_returns(monkeypatch):
    """A CUDA attention kernel may return its output in another memory order than CPU's (an H200's fp32
    kernel did: the decode step's `view` of it failed there). Attention here returns the same values laid
    out as [.., rep, Hkv, ..] underneath: the logits still equal HF's."""
    import torch.nn.functional as F

    from rlbench.engines.rollout import slot_forward

    real = F.scaled_dot_product_attention

    def other_order(*args, **kwargs):
        return real(*args, **kwargs).transpose(1, 2).contiguous().transpose(1, 2)

    model = tiny()
    ids = torch.randint(0, V, (20,), generator=torch.Generator().manual_seed(5)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0]
    monkeypatch.setattr(slot_forward.F, "scaled_dot_product_attention", other_order)
    sampler = BuiltinSampler(model, NO_EOS, max_num_seqs=4)
    torch.testing.assert_close(sampler.debug_logits(ids, 7), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_batched_logprobs_match_hf(arch):
    """Many prompts of different lengths in flight, slots refilled and compacted: every behaviour
    log-prob is that of the distribution sampled: HF's softmax(logits / T) at that position renormalised
    over the top-p nucleus (vLLM's processed log-probs)."""
    model = tiny(arch)
    sampler = BuiltinSampler(model, eos_token_id=5, max_num_seqs=5)
    sp = SamplingParams(n=3, temperature=0.7, top_p=0.9, max_new_tokens=12, seed=4)
    groups = sampler.generate(prompts(6), sp)
    for g in groups:
        for resp, lps in zip(g.responses, g.behaviour_logprobs):
            ids = torch.tensor([g.prompt_ids + resp])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0].double() / 0.7, -1)
            P = len(g.prompt_ids)
            probs = logp[P - 1:-1].exp()
            vals = probs.sort(-1, descending=True).values
            nucleus = (vals * ((vals.cumsum(-1) - vals) < 0.9)).sum(-1)  # [R] mass of the nucleus
            assert (nucleus < 1 - 1e-3).any()  # the cut removes mass, so the renormalisation is tested
            want = logp[P - 1:-1].gather(1, torch.tensor(resp)[:, None])[:, 0] - nucleus.log()
            torch.testing.assert_close(torch.tensor(lps, dtype=torch.float64), want, atol=1e-4, rtol=0)
            mass_before = (probs * (probs > probs.gather(1, torch.tensor(resp)[:, None]))).sum(-1)
            assert (mass_before < 0.9 + 1e-9).all()  # every token lies inside the top-p nucleus


def test_batch_invariance():
    model = tiny()
    reqs = prompts(5)
    sp = SamplingParams(n=4, max_new_tokens=14, seed=7, iteration=2)
    full = by_index(BuiltinSampler(model, 5, max_num_seqs=32).generate(reqs, sp))
    small = BuiltinSampler(model, 5, max_num_seqs=3)  # forces refills and compaction
    refilled = by_index(small.generate(reqs, sp))
    assert small.last_stats["mean_active"] <= 3
    for r in reqs:
        alone = BuiltinSampler(model, 5, max_num_seqs=2).generate([r], sp)[0]
        for other in (full[r.index], refilled[r.index]):
            assert other.responses == alone.responses
            assert other.finished == alone.finished
            for a, b in zip(other.behaviour_logprobs, alone.behaviour_logprobs):
                torch.testing.assert_close(a, b, atol=1e-4, rtol=0)  # matmul rounding varies with batch size


def test_groups_stream_in_completion_order():
    """Request 1 hits EOS before request 0 does: its group is emitted first, while 0 is still running."""
    model = tiny()
    reqs = prompts(2, seed=5)
    probe = by_index(BuiltinSampler(model, NO_EOS, 8).generate(reqs, SamplingParams(n=1, greedy=True, max_new_tokens=20)))
    first = {}  # token -> first position in each greedy response
    for i in (0, 1):
        for t, tok in enumerate(probe[i].responses[0]):
            first.setdefault(tok, {}).setdefault(i, t)
    eos = next(tok for tok, at in first.items() if 1 in at and at[1] + 2 < at.get(0, 99))

    seen, in_flight = [], []
    sampler = BuiltinSampler(model, eos, max_num_seqs=8)

    def on_group(g):  # white-box peek: how many sequences are still in their slots right now
        seen.append(g)
        in_flight.append(sum(m is not None for m in sampler._meta))

    groups = sampler.generate(reqs, SamplingParams(n=1, greedy=True, max_new_tokens=20), on_group=on_group)
    assert [g.prompt_index for g in groups] == [1, 0]
    assert seen == groups  # once per request, in completion order
    assert in_flight == [1, 0]  # group 1 went out while request 0 was still decoding
    assert groups[0].responses[0][-1] == eos and groups[0].finished == [True]

    sp = SamplingParams(n=3, max_new_tokens=10, seed=1)
    seen = []
    groups = sampler.generate(prompts(5), sp, on_group=seen.append)
    assert seen == groups and sorted(g.prompt_index for g in groups) == list(range(5))
    for g in groups:
        assert len(g.responses) == len(g.behaviour_logprobs) == len(g.finished) == 3
        for resp, lps, fin in zip(g.responses, g.behaviour_logprobs, g.finished):
            assert len(resp) == len(lps) and 1 <= len(resp) <= 10
            assert fin == (resp[-1] == eos) and (fin or len(resp) == 10) and eos not in resp[:-1]
    st = sampler.last_stats
    assert st["tokens_generated"] == sum(len(r) for g in groups for r in g.responses)
    assert st["max_num_seqs"] == 8 and 0 < st["mean_active"] <= 8 and st["decode_steps"] >= 9


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_greedy_equals_hf_generate(arch):
    model = tiny(arch)
    req = prompts(1, seed=9)[0]
    with torch.no_grad():
        hf = model.generate(torch.tensor([req.prompt_ids]), do_sample=False, max_new_tokens=24,
                            eos_token_id=NO_EOS, pad_token_id=0)[0, len(req.prompt_ids):].tolist()
    g = BuiltinSampler(model, NO_EOS, 8).generate([req], SamplingParams(n=1, greedy=True, max_new_tokens=24))[0]
    assert g.responses[0] == hf and g.finished == [False]


def test_load_weights_changes_outputs_and_version():
    model, other = tiny(seed=0), tiny(seed=1)
    sampler = BuiltinSampler(tiny(seed=0), NO_EOS, 8)
    reqs, sp = prompts(3), SamplingParams(n=1, greedy=True, max_new_tokens=10)
    before = by_index(sampler.generate(reqs, sp))
    assert all(g.version == 0 for g in before.values())
    sampler.load_weights(dict(other.named_parameters()), version=3)
    after = by_index(sampler.generate(reqs, sp))
    assert sampler.version == 3 and all(g.version == 3 for g in after.values())
    assert any(before[i].responses != after[i].responses for i in before)
    sampler.load_weights(model.state_dict(), version=4)  # state_dict() names work too
    assert by_index(sampler.generate(reqs, sp))[0].responses == before[0].responses
    with pytest.raises(KeyError, match="lacks"):
        sampler.load_weights({}, version=5)


def test_seeding():
    sampler = BuiltinSampler(tiny(), NO_EOS, max_num_seqs=16)
    reqs = prompts(3)

    def run(**kw):
        return [g.responses for g in sorted(sampler.generate(reqs, SamplingParams(n=4, max_new_tokens=12, **kw)),
                                            key=lambda g: g.prompt_index)]

    assert run(seed=1, iteration=0) == run(seed=1, iteration=0)
    assert run(seed=1, iteration=0) != run(seed=1, iteration=1)
    assert run(seed=1, iteration=0) != run(seed=2, iteration=0)
    samples = run(seed=1, iteration=0)
    assert all(len({tuple(r) for r in group}) > 1 for group in samples)  # the G samples differ
    assert sample_seed(1, 2, 3, 4) == sample_seed(1, 2, 3, 4) != sample_seed(1, 2, 4, 3)


def test_tiny_top_p_is_greedy_and_low_temperature_too():
    sampler = BuiltinSampler(tiny(), NO_EOS, 8)
    reqs = prompts(4)
    greedy = by_index(sampler.generate(reqs, SamplingParams(n=1, greedy=True, max_new_tokens=12)))
    for kw in (dict(top_p=1e-6), dict(temperature=1e-3)):
        for i, g in by_index(sampler.generate(reqs, SamplingParams(n=2, max_new_tokens=12, **kw))).items():
            assert g.responses == greedy[i].responses * 2


def test_top_p_candidates_equal_full_sort():
    """The top-k shortcut picks exactly the token a full stable sort would, row by row, whatever the
    batch: peaked rows (nucleus in the top 256), medium ones (top 4096) and flat ones (full sort)."""
    g = torch.Generator().manual_seed(0)
    V, top_p = 5000, 0.9
    scale = torch.tensor([8.0] * 4 + [2.5] * 4 + [0.1] * 4, dtype=torch.float64)[:, None]
    z = torch.randn(12, V, generator=g, dtype=torch.float64) * scale
    p = (z - z.max(-1, keepdim=True).values).exp()
    u = torch.rand(12, generator=g, dtype=torch.float64)

    vals, order = p.sort(dim=-1, descending=True, stable=True)  # the textbook nucleus
    cum = vals.cumsum(-1)
    kept = vals * ((cum - vals) < top_p * p.sum(-1, keepdim=True))
    kcdf = kept.cumsum(-1)
    want = order.gather(1, torch.searchsorted(kcdf, (u * kcdf[:, -1])[:, None], right=True))[:, 0]
    nucleus = ((cum - vals) < top_p * p.sum(-1, keepdim=True)).sum(-1)
    assert nucleus[:4].max() < 256 < nucleus[4:8].min() and nucleus[4:8].max() < 4096 < nucleus[8:].min()

    tok, mass = top_p_sample(p, p.sum(-1), u, top_p)
    assert torch.equal(tok, want)
    torch.testing.assert_close(mass, kept.sum(-1), rtol=1e-12, atol=0)  # the nucleus' mass, for the log-prob
    for i in (0, 5, 11):
        assert top_p_sample(p[i:i + 1], p[i:i + 1].sum(-1), u[i:i + 1], top_p)[0].item() == want[i]


def test_max_len():
    sampler = BuiltinSampler(tiny(), NO_EOS, 8, max_len=16)
    g = sampler.generate([PromptRequest(0, list(range(10)))], SamplingParams(n=2, max_new_tokens=20))[0]
    assert [len(r) for r in g.responses] == [6, 6] and g.finished == [False, False]  # prompt + response <= 16
    with pytest.raises(ValueError, match="16 tokens.*max_len=16"):
        sampler.generate([PromptRequest(0, list(range(16)))], SamplingParams(n=1, max_new_tokens=4))
