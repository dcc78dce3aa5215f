"""The partial-rollout model (core/costmodel/partial.py): a hand-computed replay and timeline, what it reduces
to, and the bounds that say what partial rollout can cost and buy in rlbench's engine."""
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rlbench.core.costmodel.decode import StepCost, replay_posted
from rlbench.core.costmodel.sync_measurements import SyncMeasurements
from rlbench.simulate import simulate
from rlbench.core.costmodel.bounded import bounded
from rlbench.simulate.model import lognormal_samples
from rlbench.core.costmodel.partial import mid_batch

BOUNDED_K = "bounded_async"


def _batch(rows, ws=0.5, opt=0.0, c_tok=0.1, slots=1, g=1, step_s=1.0, refill_s=0.0, prefill=0.1):
    cost = StepCost({1: (1, step_s)}, refill_s, 1 if refill_s else 0, prefill_s_per_token=prefill)
    return SyncMeasurements.stated(cost, c_tok, ws, opt, slots, g, False, rows, 1)


def _batches(seed: int, ws: float, c_tok: float, slots: int, sigma: float, prompts: int, g: int,
             prefill: float = 0.0, equal: bool = False, count: int = 4) -> list[SyncMeasurements]:
    out = []
    for b in range(count):
        rows = lognormal_samples(prompts, g, 64, sigma, 512, 40, 5, seed=seed * 100 + b)
        if equal:
            rows = [{**r, "response_len": 64} for r in rows]
        cost = StepCost({1: (1, 2e-3), slots: (1, 4e-3)}, 0.01, 1, prefill_s_per_token=prefill)
        out.append(SyncMeasurements.stated(cost, c_tok, ws, 5e-3, slots, g, False, rows, 2))
    return out


def test_replay_by_hand():
    """Two sequences (5 and 9 tokens, prompts of 10) in 2 slots, 1 s per decode step, 0.5 s per refill;
    version 1 posted at 3.2 s: taken before the 4th decode step (t = 3.5), load 0.25 s + 26 tokens
    (10 + 3 fed, twice) x 0.01 s recomputed; then A ends at step 4, B at step 8."""
    rows = [{"prompt": 0, "sample": 0, "prompt_len": 10, "response_len": 5},
            {"prompt": 1, "sample": 0, "prompt_len": 10, "response_len": 9}]
    cost = StepCost({1: (1, 1.0), 2: (1, 1.0)}, 0.5, 1, prefill_s_per_token=0.01)
    done, total, loaded, recomputed = replay_posted(rows, 2, 1, cost, [(3.2, 1)], 0.25)
    assert done == pytest.approx({0: 5.01, 1: 9.51}) and total == pytest.approx(10.01)
    assert loaded == [1] and recomputed == 26
    done, total, loaded, recomputed = replay_posted(rows, 2, 1, cost, [(3.2, 1)], 0.25, recompute=False)
    assert done == pytest.approx({0: 4.75, 1: 9.25}) and (loaded, recomputed) == ([1], 0)
    assert replay_posted(rows, 2, 1, cost, [], 0.25)[:2] == ({0: 4.5, 1: 9.0}, 9.5)  # predict.replay's


def test_timeline_by_hand():
    """1 + 1 devices, k = 1, one 5-token response per batch (4 decode steps of 1 s), training 1.5 s, weight
    sync 0.5 s. Batch 0: arrives at 4, trained by 5.5, version 1 posted at 6. Batch 1 starts at 4 on
    version 0; partial rollout takes version 1 before its 3rd step (t = 2 into it): 0.5 s load + 12 tokens
    (prompt 10 + 2 fed) x 0.1 s, so it arrives at 4 + 5.7 and version 2 is out at 9.7 + 1.5 + 0.5 = 11.7;
    without partial rollout at 4 + 4, trained from 8 to 9.5, version 2 at 10."""
    b = _batch([{"prompt": 0, "sample": 0, "prompt_len": 10, "response_len": 5}])
    tpspd, _, stale, its = bounded([b], 1, 1, 1, iterations=2, worker=mid_batch())
    assert its == pytest.approx([6.0, 5.7]) and stale == 1 and tpspd == pytest.approx(30 / (11.7 * 2))
    assert bounded([b], 1, 1, 1, iterations=2)[3] == pytest.approx([6.0, 4.0])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), k=st.integers(0, 3), split=st.sampled_from([(1, 1), (2, 1), (1, 2), (3, 2)]),
       sigma=st.sampled_from([0.3, 1.0, 2.0]), slots=st.sampled_from([4, 16]), g=st.sampled_from([1, 4]))
def test_free_interruptions_are_bounded_staleness(seed, k, split, sigma, slots, g):
    """No load and no recompute cost: taking weights mid-batch changes nothing in time, for any lengths."""
    bs = _batches(seed, ws=0.0, c_tok=1e-4, slots=slots, sigma=sigma, prompts=8, g=g, prefill=1e-3)
    a = simulate(bs, BOUNDED_K, *split, staleness=k)
    p = simulate(bs, BOUNDED_K, *split, staleness=k, partial_rollout=True, resume_kv="keep")
    assert p.per_iteration_s == a.per_iteration_s and p.tpspd == a.tpspd and p.partial_rollout


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), k=st.integers(0, 3), split=st.sampled_from([(1, 1), (2, 1), (1, 2), (3, 2)]),
       ws=st.sampled_from([1e-3, 2e-2]), c_tok=st.sampled_from([1e-5, 1e-4, 5e-4]), sigma=st.sampled_from([0.3, 2.0]))
@example(seed=0, k=2, split=(3, 2), ws=1e-3, c_tok=5e-4, sigma=0.3)
def test_without_recompute_never_slower_than_one_load_per_iteration(seed, k, split, ws, c_tok, sigma):
    """Zero recompute cost (resume_kv=keep): partial rollout is never slower than bounded staleness but for
    the extra loads of versions that come out during one batch (each taken, where a batch boundary takes
    the newest only): at most one weight sync per iteration. With recompute it is never faster but for
    skipped loads: a worker slowed by its recomputes can find a newer version posted and skip the one
    between, at most one load per rollout worker and iteration (found: seed 0, k 2, 3 + 2 devices,
    0.8800 s against 0.8817 s with 1 ms loads). Derandomized: the same examples in every run."""
    bs = _batches(seed, ws=ws, c_tok=c_tok, slots=16, sigma=sigma, prompts=8, g=4, prefill=1e-4)
    a = simulate(bs, BOUNDED_K, *split, staleness=k)
    keep = simulate(bs, BOUNDED_K, *split, staleness=k, partial_rollout=True, resume_kv="keep")
    rec = simulate(bs, BOUNDED_K, *split, staleness=k, partial_rollout=True)
    assert keep.iter_s <= a.iter_s + ws + 1e-12
    assert rec.iter_s >= keep.iter_s - split[0] * ws - 1e-12


@pytest.mark.parametrize("split", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("c_tok", [1e-5, 1e-4, 1e-3])
def test_equal_lengths_reduce_to_k2(split, c_tok):
    """Every response equally long (no tail): without recompute, partial rollout is bounded k = 2."""
    bs = _batches(3, ws=1e-3, c_tok=c_tok, slots=16, sigma=1.0, prompts=8, g=4, prefill=1e-4, equal=True)
    a = simulate(bs, BOUNDED_K, *split, staleness=2)
    p = simulate(bs, BOUNDED_K, *split, staleness=2, partial_rollout=True, resume_kv="keep")
    assert p.tpspd == pytest.approx(a.tpspd, rel=1e-9)


def test_recompute_costs_what_it_prefills():
    """The recompute cost grows with the prefill seconds per token; zero where there are no posts mid-batch
    (k = 0 on one worker: the next batch waits for the new version, which it loads at its start)."""
    rows = lognormal_samples(4, 4, 64, 1.5, 256, 30, 3, seed=7)
    bs = [_batch(rows, ws=1e-3, c_tok=1e-4, slots=16, g=4, step_s=2e-3, prefill=p) for p in (0.0, 1e-4, 1e-3)]
    rates = [simulate([b], BOUNDED_K, 1, 1, staleness=2, partial_rollout=True).tpspd for b in bs]
    assert rates[0] > rates[1] > rates[2]
    k0 = [simulate([b], BOUNDED_K, 1, 1, staleness=0, partial_rollout=True).tpspd for b in bs]
    assert k0[0] == k0[1] == k0[2] == simulate([bs[0]], BOUNDED_K, 1, 1, staleness=0).tpspd
