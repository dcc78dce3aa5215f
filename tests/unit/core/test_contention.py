"""The proposed contention term (core/costmodel/contention.py) on synthetic sync cells with a known kappa."""
from __future__ import annotations

import pytest

from rlbench.core.costmodel.contention import (
    _two_workers,
    async_time_contended,
    estimate_kappa,
    mean_overlaps,
    overlap_share,
    predict_contended,
    training_points,
)
from rlbench.core.costmodel.decode import StepCost
from rlbench.core.costmodel.sync_measurements import SyncMeasurements


def ev(worker, stage, k, start, end):
    return {"worker": worker, "stage": stage, "iteration": k, "start": start, "end": end, "devices": 1}


def test_overlap_share_is_the_union_of_the_others_spans():
    e = ev("a", "update", 0, 0.0, 10.0)
    others = [ev("b", "rollout", 0, -5.0, 2.0), ev("b", "update", 0, 1.0, 4.0), ev("b", "update", 0, 8.0, 20.0)]
    assert overlap_share(e, others) == pytest.approx((4.0 + 2.0) / 10.0)  # [0,4] and [8,10], no double count
    assert overlap_share(e, []) == 0.0


KAPPA, C = 0.35, {"old_logprob": 2e-3, "ref_logprob": 2e-3, "update": 6e-3}  # alone seconds per token


def synthetic_sync(kappa: float = KAPPA, iterations: int = 4):
    """Two colocated ranks; rank 1's rollout is longer by a different amount each iteration, so rank 0's
    training overlaps it by 0..80%; rank 1 trains after rank 0 (alone). Stage seconds = alone x
    (1 + kappa f), integrated exactly over the other rank's busy span. -> (cell, samples, events)."""
    samples, events, its, t0 = [], [], [], 0.0
    tokens = {0: 0, 1: 0}
    for k in range(iterations):
        rows = [{"iteration": k, "prompt": p, "sample": j, "prompt_len": 20, "response_len": 10 + 5 * p}
                for p in range(4) for j in range(2)]
        samples += rows
        for r in (0, 1):
            tokens[r] = sum(s["prompt_len"] + s["response_len"] for s in rows if s["prompt"] % 2 == r)
        roll = {0: 1.0, 1: 1.0 + 0.4 * k}
        busy = {1: [(t0, t0 + roll[1])]}  # rank 1's compute spans (rollout first, its training added below)
        t = {0: t0 + roll[0], 1: t0 + roll[1]}
        for r in (0, 1):
            events.append(ev(f"colocated{r}", "rollout", k, t0, t0 + roll[r]))
        for stage in ("old_logprob", "ref_logprob", "update"):  # rank 0 first, against rank 1's rollout
            t[0] = _run(events, "colocated0", stage, k, t[0], C[stage] * tokens[0], busy[1], kappa)
        spans0 = [(e["start"], e["end"]) for e in events if e["worker"] == "colocated0" and e["iteration"] == k]
        t[1] = max(t[1], t[0])
        for stage in ("old_logprob", "ref_logprob", "update"):  # rank 1, against rank 0's training
            t[1] = _run(events, "colocated1", stage, k, t[1], C[stage] * tokens[1], spans0, kappa)
        end = max(t.values()) + 0.01
        for r in (0, 1):
            events.append(ev(f"colocated{r}", "optimizer_step", k, t[r], end))
        tok = sum(s["prompt_len"] + s["response_len"] for s in rows)
        its.append({"iteration": k, "wall_s": end - t0, "tokens": tok, "devices": 2, "warmup": False,
                    "tpspd": tok / ((end - t0) * 2)})
        t0 = end
    cell = {"cell": "sync", "iterations": its, "devices": 2, "rollout_stats": [],
            "config": {"rollout": {"max_num_seqs": 8, "group_size": 2}, "train": {"micro_batch_size": 2}}}
    return cell, samples, events


def _run(events, worker, stage, k, start, work, busy_spans, kappa) -> float:
    """A stage of `work` alone-seconds starting at `start`, at rate 1/(1+kappa) inside busy_spans."""
    t, left = start, work
    for a, b in sorted(busy_spans) + [(float("inf"), float("inf"))]:
        if b <= t:
            continue
        if a > t:  # alone until the other rank starts
            step = min(left, a - t)
            t, left = t + step, left - step
            if left <= 0:
                break
        rate = 1.0 / (1.0 + kappa)
        step = min(left / rate, b - t)
        t, left = t + step, left - step * rate
        if left <= 1e-15:
            break
    events.append(ev(worker, stage, k, start, t))
    return t


def test_kappa_is_recovered_from_the_sync_cell_alone():
    cell, samples, events = synthetic_sync()
    pts = training_points(events, samples, {0, 1, 2, 3})
    assert len(pts) == 3 * 2 * 4 and max(f for _, f, _ in pts) - min(f for _, f, _ in pts) > 0.5
    assert {round(f, 6) for stage, f, _ in pts if stage == "update"} != {0.0}
    est = estimate_kappa(pts)
    assert est["kappa"] == pytest.approx(KAPPA, rel=1e-6) and est["reason"] is None
    _, samples0, events0 = synthetic_sync(kappa=0.0)
    assert estimate_kappa(training_points(events0, samples0, {0, 1, 2, 3}))["kappa"] == pytest.approx(0.0, abs=1e-9)


def test_kappa_is_not_guessed_when_the_ranks_always_overlap():
    pts = [(stage, 1.0, 1e-4 * (i + 1)) for i, stage in enumerate(["old_logprob", "update"] * 3)]
    est = estimate_kappa(pts)
    assert est["kappa"] is None and "not identifiable" in est["reason"]


def _batch(c_tok=1e-3, step=0.01):
    rows = [{"prompt": p, "sample": j, "prompt_len": 20, "response_len": 5 + 20 * (p == 3)}
            for p in range(4) for j in range(2)]
    return SyncMeasurements.stated(StepCost({}, 0.0, 0, fallback_s=step), c_tok, 0.001, 0.002, 8, 2, False, rows, 2)


def test_without_contention_it_is_the_model():
    m = _batch()
    assert async_time_contended(m, 0.0, 0.7, 0.9) == pytest.approx(m.async_time(1, 1), rel=1e-12)
    assert async_time_contended(m, 0.0, 0.7, 0.9, overlap=False) == pytest.approx(m.async_time(1, 1, False), rel=1e-12)


def test_two_workers_slow_each_other_only_while_both_compute():
    # one job at 0 of 1 s, 3 s of rollout: together for 1.3 s (1 s of training at 1/1.3), then 2 s alone
    assert _two_workers([(0.0, 1.0)], 3.0, 0.3, 0.3) == pytest.approx(1.3 + 2.0)
    # the job arrives when rollout ends: never together
    assert _two_workers([(3.0, 1.0)], 3.0, 0.3, 0.3) == pytest.approx(4.0)


def test_contention_makes_alone_phases_faster_than_the_sync_costs_say():
    m = _batch()
    barrier = async_time_contended(m, 0.3, f_train=1.0, f_roll=1.0, overlap=False)
    # everything alone: sync's costs (measured always together) / 1.3, plus the weight syncs and step
    assert barrier - 2 * m.ws - m.opt == pytest.approx((m.async_time(1, 1, False) - 2 * m.ws - m.opt) / 1.3)
    assert async_time_contended(m, 0.3, 1.0, 1.0) < m.async_time(1, 1)


def test_predict_contended_on_a_synthetic_run():
    cell, samples, events = synthetic_sync()
    f_train, f_roll = mean_overlaps(events, {0, 1, 2, 3})
    assert 0.0 < f_train < 1.0 and 0.0 < f_roll <= 1.0
    out = predict_contended(cell, samples, events)
    assert out["kappa"] == pytest.approx(KAPPA, rel=1e-6) and out["predicted_speedup"] > 0


def test_each_side_slows_by_its_own_kappa():
    # training slowed 50% while the rollout runs (1 s of work takes 1.5 s), the rollout not at all: the
    # rollout ends at 3 s; the job's 1 s of work is done by 1.5 s, inside it
    assert _two_workers([(0.0, 1.0)], 3.0, 0.0, 0.5) == pytest.approx(3.0)
    # the rollout slowed 50% while the job trains: 1 s of training, during which 2/3 s of rollout work
    assert _two_workers([(0.0, 1.0)], 3.0, 0.5, 0.0) == pytest.approx(1.0 + (3.0 - 1.0 / 1.5))
    m = _batch()
    assert async_time_contended(m, (0.0, 0.0), 0.7, 0.9) == pytest.approx(m.async_time(1, 1), rel=1e-12)


def test_the_measured_probe_replaces_the_sync_cell_estimate():
    cell, samples, events = synthetic_sync()
    probe = {"decode": {"kappa": 0.05}, "train": {"kappa": 0.2}}
    out = predict_contended(cell, samples, events, probe=probe)
    assert out["kappa"] == (0.05, 0.2) and out["kappa_source"] == "probe" and out["predicted_speedup"] > 0
    assert predict_contended(cell, samples, events)["kappa_source"] == "sync cell"
    broken = {"decode": {"kappa": None}, "train": {"kappa": 0.2}}  # a side it could not measure: not used
    assert predict_contended(cell, samples, events, probe=broken)["kappa_source"] == "sync cell"


@pytest.mark.e2e
@pytest.mark.slow  # a measurement of two processes slowing each other, on a core they share
def test_the_probe_measures_both_sides_alone_and_together(tmp_path):
    """The calibration step for real, with a slowdown known in advance: both single-thread processes pinned
    to the same core, so together each runs about half the time and its kappa (alone / together - 1) is
    about 1 (a probe that never ran the two sides at once, or read the ratio upside down, gives about 0);
    the file written, no process left."""
    import multiprocessing as mp

    from rlbench.core.config_files import load_config
    from rlbench.core.results import schema
    from rlbench.experiments.regime import probe as contention_probe

    r = contention_probe.measure(load_config(None, []).model.model_dump(mode="json"), tmp_path, cores=(0, 0),
                                 phase_s=0.4)
    for side in ("decode", "train"):
        # about 1 on a quiet core; beside other work it moves both ways (2.2 measured with a third process on
        # the pinned core, 0.24 with one slowing the "alone" phase too); a probe that reads the ratio upside
        # down gives about -0.5, one that never overlapped the sides about 0
        assert 0.1 < r[side]["kappa"] < 4.0, r[side]
        assert r[side]["kappa"] == pytest.approx(r[side]["alone_per_s"] / r[side]["together_per_s"] - 1)
    assert schema.read_contention_probe(tmp_path) == r
    assert not mp.active_children()
