"""The built-in sampler's static decode step (engines/rollout/decode_step.py) is the same sampler: every
token is the one the seeding contract picks (HF's forward, the sample's own uniforms, `draw`), with
sequences admitted and retired mid-batch, a batch split over several steps, and top-p rows redrawn; the
step has fixed shapes and no host sync; on CUDA graph replay == eager (marked gpu)."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlbench.core.errors import UserError
from rlbench.engines.rollout.base import PromptRequest, SamplingParams
from rlbench.engines.rollout import decode_step
from rlbench.engines.rollout.decode_step import batch_buckets, layout
from rlbench.engines.rollout.sampler import BuiltinSampler
from rlbench.engines.rollout.sampling import (LengthSampling, StepMode, draw, draw_static, sample_seed,
                                              target_length)

from test_sampler import NO_EOS, by_index, prompts, tiny

pytestmark = pytest.mark.usefixtures("one_thread")


def reference(model, req: PromptRequest, j: int, sp, eos: int, max_len: int = 256):
    """Sample j of `req` as the seeding contract defines it, one sequence alone, through HF's full forward:
    token n is draw(logits at the last position, the sample's n-th uniform). -> (tokens, log-probs)."""
    u = torch.zeros(sp.max_new_tokens, dtype=torch.float64)
    if not sp.greedy:
        g = torch.Generator().manual_seed(sample_seed(sp.seed, sp.iteration, req.index, j))
        u = torch.rand(sp.max_new_tokens, generator=g, dtype=torch.float64)
    limit = min(target_length(sp, req.index, j) or sp.max_new_tokens, max_len - len(req.prompt_ids))
    eos_stops = getattr(sp, "response_length", "eos") == "eos"
    ids, toks, lps = list(req.prompt_ids), [], []
    with torch.no_grad():
        for n in range(limit):
            logits = model(torch.tensor([ids])).logits[0, -1:].float()
            tok, lp = draw(logits, u[n:n + 1], sp)
            toks.append(int(tok))
            lps.append(float(lp))
            ids.append(int(tok))
            if eos_stops and int(tok) == eos:
                break
    return toks, lps


def assert_contract(model, groups, reqs, sp, eos):
    got = by_index(groups)
    assert sorted(got) == [r.index for r in reqs]
    for r in reqs:
        for j in range(sp.n):
            toks, lps = reference(model, r, j, sp, eos)
            assert got[r.index].responses[j] == toks, (r.index, j)
            torch.testing.assert_close(got[r.index].behaviour_logprobs[j], lps, atol=1e-4, rtol=0)


def common_token(model, reqs) -> int:
    """A token the greedy responses use often: as EOS it ends sequences at different steps."""
    sampler = BuiltinSampler(model, NO_EOS, 8)
    seen = [t for g in sampler.generate(reqs, SamplingParams(n=1, greedy=True, max_new_tokens=12))
            for t in g.responses[0]]
    return max(set(seen), key=seen.count)


@pytest.mark.parametrize("kind", ["greedy", "sampled", "top_p", "lognormal"])
def test_tokens_are_the_seeding_contracts_with_slots_refilled(kind):
    """max_num_seqs 3 for 12 sequences: slots are refilled, compacted and run in buckets 1, 2 and 4."""
    model = tiny()
    reqs = prompts(6, seed=11)
    eos = common_token(model, reqs)
    sp = {"greedy": SamplingParams(n=1, greedy=True, max_new_tokens=12),
          "sampled": SamplingParams(n=2, temperature=0.8, max_new_tokens=12, seed=3, iteration=1),
          "top_p": SamplingParams(n=2, temperature=0.9, top_p=0.8, max_new_tokens=12, seed=5),
          "lognormal": LengthSampling(n=2, max_new_tokens=14, seed=2, response_length="lognormal",
                                      response_length_mean=6)}[kind]
    sampler = BuiltinSampler(model, eos, max_num_seqs=3)
    groups = sampler.generate(reqs, sp)
    assert_contract(model, groups, reqs, sp, eos)
    lengths = {len(r) for g in groups for r in g.responses}
    assert len(lengths) > 2  # sequences ended at different steps, so slots were refilled mid-batch
    assert 1 < sampler.last_stats["mean_active"] <= 3


def test_a_batch_larger_than_the_largest_bucket_is_split_not_truncated():
    model = tiny()
    reqs = prompts(4, seed=2)
    sp = SamplingParams(n=3, temperature=0.8, max_new_tokens=10, seed=1)
    whole = by_index(BuiltinSampler(model, NO_EOS, max_num_seqs=12).generate(reqs, sp))
    sampler = BuiltinSampler(model, NO_EOS, max_num_seqs=12, max_bucket=5)  # steps over [0,5) [5,10) [10,12)
    assert layout(12, sampler._runner.buckets, 12) == [(0, 5), (5, 10), (10, 12)]
    split = by_index(sampler.generate(reqs, sp))
    assert sampler.last_stats["mean_active"] == 12
    assert {i: g.responses for i, g in split.items()} == {i: g.responses for i, g in whole.items()}
    assert all(len(r) == 10 for g in split.values() for r in g.responses)


def test_top_p_rows_beyond_the_candidates_are_redrawn_exactly():
    """A vocabulary of 600: flat rows have a nucleus larger than draw_static's 256 candidates and are
    redrawn by `draw` outside the step; peaked rows are drawn inside it. Either way, `draw`'s tokens."""
    g = torch.Generator().manual_seed(0)
    scale = torch.tensor([6.0] * 5 + [0.1] * 5)[:, None]
    logits = torch.randn(10, 600, generator=g) * scale
    u = torch.rand(10, generator=g, dtype=torch.float64)
    mode = StepMode(greedy=False, temperature=1.0, top_p=0.9, eos_stops=True)
    tok, lp, redraw = draw_static(logits, u, mode)
    want, want_lp = draw(logits, u, mode)
    assert redraw.tolist() == [False] * 5 + [True] * 5
    assert torch.equal(tok[:5], want[:5])
    torch.testing.assert_close(lp[:5], want_lp[:5], rtol=0, atol=1e-12)

    from transformers import Qwen2Config, Qwen2ForCausalLM  # the same through generate(): redraws happen
    cfg = Qwen2Config(vocab_size=600, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, max_position_embeddings=256)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).eval()
    reqs = [PromptRequest(i, list(range(3 + i, 9 + 2 * i))) for i in range(3)]
    sp = SamplingParams(n=2, top_p=0.9, max_new_tokens=6, seed=4)
    assert_contract(model, BuiltinSampler(model, NO_EOS, max_num_seqs=4).generate(reqs, sp), reqs, sp, NO_EOS)


def test_buckets():
    assert batch_buckets(16) == [1, 2, 4, 8, 16]
    assert batch_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert batch_buckets(64) == [1, 2, 4] + list(range(8, 65, 8))
    assert batch_buckets(1000)[-4:] == [464, 480, 496, 512] and 264 not in batch_buckets(1000)
    for S, top in ((12, 4), (64, 64), (70, 16)):
        buckets = batch_buckets(S, top)
        for B in range(1, S + 1):
            ranges = layout(B, buckets, S)
            assert ranges[0][0] == 0 and all(x[1] == y[0] for x, y in zip(ranges, ranges[1:]))
            assert B <= ranges[-1][1] <= S and all(b - a <= top for a, b in ranges)  # every live slot, in bounds


class _Ops(TorchDispatchMode):
    """Every aten operator dispatched while active (scripts/micro_decode.py counts the same way)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_the_step_has_fixed_operators_and_no_host_sync():
    """The same operators at buckets 1, 2 and 8, none of them one that reads a value back to the host."""
    sampler = BuiltinSampler(tiny(), NO_EOS, max_num_seqs=16)
    sampler.generate(prompts(2), SamplingParams(n=1, max_new_tokens=4, top_p=0.9))  # buffers allocated
    seen = {}
    for mode in (StepMode(True, 1.0, 1.0, True), StepMode(False, 0.7, 0.9, True)):
        for b in (1, 2, 8):
            with torch.inference_mode():
                sampler._step(0, b, mode)  # a range's views are made on its first step
            with torch.inference_mode(), _Ops() as ops:
                sampler._step(0, b, mode)
            seen[mode, b] = ops.ops
        assert seen[mode, 1] == seen[mode, 2] == seen[mode, 8]
        assert not {"_local_scalar_dense", "nonzero", "masked_select", "item"} & set(seen[mode, 1])


def test_an_eager_step_attends_over_the_window_its_slots_reach_with_the_same_logits():
    """Eagerly (CPU) a step attends over the cache positions its slots reach, rounded up, not the whole
    cache: every K/V view it reads is that long, and its logits are those of the whole-cache step (the
    positions it leaves out are masked there: they weigh exactly zero)."""
    sampler = BuiltinSampler(tiny(), NO_EOS, max_num_seqs=8)
    sampler.generate(prompts(4), SamplingParams(n=1, max_new_tokens=200))  # a cache far longer than the prompts
    prompt = prompts(1)[0].prompt_ids
    with torch.inference_mode():
        sampler._ensure_cache(64, 4)
        sampler._install(0, sampler._prefill(prompt)[0], len(prompt))
        window = sampler._window(0, 1)
        assert len(prompt) < window < sampler._cache_len and window % 16 == 0
        views = sampler._slot_views(0, 1, window)
        assert {k.shape[2] for k, v in views["kv"]} == {window}
        windowed = sampler._step_logits(views).clone()
        whole = sampler._step_logits(sampler._slot_views(0, 1))
    torch.testing.assert_close(windowed, whole, rtol=1e-5, atol=1e-5)


def test_cuda_graphs_true_without_cuda_is_refused(tiny_config_path):
    from rlbench.core.config_files import load_config

    with pytest.raises(UserError, match="rollout.cuda_graphs"):
        load_config(tiny_config_path, ["rollout.cuda_graphs=true"])
    assert load_config(tiny_config_path, ["rollout.cuda_graphs=false"]).rollout.cuda_graphs is False
    with pytest.raises(UserError, match="rollout.cuda_graphs=true needs a CUDA device"):
        BuiltinSampler(tiny(), NO_EOS, 4, cuda_graphs=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_replay_equals_eager_on_cuda(dtype, monkeypatch):
    """The captured steps run the same kernels on the same tensors: bitwise the eager tokens and
    log-probs, with slots refilled (buckets 1..8) and a batch split over two steps; one replay per step
    and range. The eager steps attend over the whole cache here, as a captured one does (by default they
    attend over the window their slots reach, a different reduction length: equal values, not bitwise)."""
    monkeypatch.setattr(decode_step, "WINDOW_ROUND", 1 << 30)
    model = tiny().to("cuda", dtype)
    reqs = prompts(7, seed=4)
    eos = common_token(tiny(), reqs)
    for sp in (SamplingParams(n=2, temperature=0.8, max_new_tokens=16, seed=1),
               SamplingParams(n=1, greedy=True, max_new_tokens=16)):
        out = {}
        for graphs in (False, True):
            s = BuiltinSampler(model, eos, max_num_seqs=6, cuda_graphs=graphs, max_bucket=4)
            out[graphs] = by_index(s.generate(reqs, sp))
            if graphs:
                steps = s.last_stats["decode_steps"]
                assert steps <= s._runner.replays <= 2 * steps  # 6 slots: one or two ranges per step
        for i, g in out[True].items():
            assert g.responses == out[False][i].responses
            assert g.behaviour_logprobs == out[False][i].behaviour_logprobs


@pytest.mark.slow  # counts operators and kernels per step (scripts/micro_decode.py): a measurement
def test_micro_decode_counts_fewer_operators_than_hf_generate_whatever_the_batch():
    """scripts/micro_decode.py on the tiny shape (its CPU dry run): per decode step the built-in sampler
    dispatches no more operators than HF `generate`, in each decoder layer and in all, at batch 1 and 8
    alike (the step's own count is fixed; the per-call bookkeeping spread over the steps shrinks)."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from micro_decode import sampler_bench, summary

    res = {b: sampler_bench("tiny", torch.device("cpu"), torch.float32, b, 8, 5, rounds=1, warmup=0)
           for b in (1, 8)}
    for r in res.values():
        ours, hf = r["builtin"], r["hf_generate"]
        assert ours["ops_per_layer"] <= hf["ops_per_layer"] and ours["ops_per_step"] <= hf["ops_per_step"]
        assert r["floor"]["step_s"] > 0 and "builtin" in summary(r)
    assert res[8]["builtin"]["ops_per_step"] <= res[1]["builtin"]["ops_per_step"]  # does not grow with the batch
    for r in res.values():  # engine.compile decode: inductor's fused kernels, counted as it runs them
        compiled = r["builtin_compiled"]
        assert "error" not in compiled and compiled["ops_per_step"] is None
        assert compiled["kernels_per_step"] < 0.7 * r["builtin"]["kernels_per_step"]
