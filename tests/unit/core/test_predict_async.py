"""The speedup prediction (core/costmodel/predict.py): a data-parallel sync cell's measured decode steps
and training work replayed as the periodic-async schedule would run them, the training work by micro-batch,
the step cost beyond the measured batch sizes."""
from __future__ import annotations

import statistics

import pytest

from rlbench.core.costmodel.decode import StepCost, replay
from rlbench.core.costmodel.predict import predict_async
from rlbench.core.errors import UserError


def sync_cell(step_s: float, train_s_per_token: float, samples: list[dict], ranks: int = 2,
              ws: float = 0.01, opt: float = 0.02) -> tuple[dict, list[dict]]:
    """A consistent data-parallel sync cell: every rank's rollout is its shard's replay at step_s per decode
    step, its training train_s_per_token per executed position (micro-batches of 4 padded to their longest
    row, as the trainer runs them); -> (results dict, events)."""
    from rlbench.core.costmodel.work import train_work

    iters = sorted({s["iteration"] for s in samples})
    its, events, stats, t = [], [], [], 0.0
    for k in iters:
        rows = [s for s in samples if s["iteration"] == k]
        ends, workers = [], []
        for r in range(ranks):
            shard = [s for s in rows if s["prompt"] % ranks == r]
            _, roll_steps = replay(shard, 64, 4, StepCost({}, 0.0, 0, fallback_s=1.0))
            roll, train = roll_steps * step_s, train_s_per_token * train_work(shard, False, 4)
            w, c = f"colocated{r}", t
            for stage, d in (("weight_sync", ws), ("rollout", roll), ("update", train), ("optimizer_step", opt)):
                events.append({"worker": w, "stage": stage, "iteration": k, "start": c, "end": c + d, "devices": 1})
                c += d
            ends.append(c)
            workers.append({"decode_steps": int(roll_steps), "max_num_seqs": 64,
                            "step_s_by_active": {"4": [int(roll_steps), roll]}, "refill_s": 0.0, "refills": 1})
        wall = max(ends) - t
        tokens = sum(s["prompt_len"] + s["response_len"] for s in rows)
        its.append({"iteration": k, "wall_s": wall, "tokens": tokens, "devices": ranks, "warmup": False,
                    "tpspd": tokens / (wall * ranks)})
        stats.append({"iteration": k, "workers": workers})
        t += wall
    return {"cell": "sync", "iterations": its, "rollout_stats": stats, "devices": ranks,
            "config": {"rollout": {"max_num_seqs": 64, "group_size": 4}}}, events


def samples_with(lengths_of: callable, iterations: int = 2) -> list[dict]:
    return [{"iteration": k, "prompt": p, "sample": j, "prompt_len": 20,
             "response_len": lengths_of(p, j), "reward": 0.0, "behaviour_version": k,
             "trained_version": k} for k in range(iterations) for p in range(8) for j in range(4)]


TAIL = samples_with(lambda p, j: 400 if (p, j) == (7, 0) else 10)
FLAT = samples_with(lambda p, j: 50)


def test_predict_sync_in_sample_and_long_tail_overlap():
    cell, events = sync_cell(0.01, 0.001, TAIL)
    out = predict_async(cell, TAIL, events, 1, 1)
    assert out["predicted_sync_iter_s"] == pytest.approx(out["sync_iter_s"], rel=1e-6)  # the model's own check
    assert out["rollout_share"] > 0.3  # mean over the ranks: one generates the tail, the other idles
    barrier = predict_async(cell, TAIL, events, 1, 1, overlap=False)
    # one rollout worker takes the whole batch in the tail's time; training overlaps it, the barrier cannot
    assert out["predicted_speedup"] > 1.0 > barrier["predicted_speedup"] * 0.999
    assert out["predicted_iter_s"] < barrier["predicted_iter_s"]


def test_predict_training_bound_loses():
    cell, events = sync_cell(0.001, 0.002, FLAT)
    out = predict_async(cell, FLAT, events, 1, 1)
    # training dominates: one trainer rank does the work two colocated ranks shared
    assert out["predicted_speedup"] < 0.7 and out["rollout_share"] < 0.2


def test_replay_continuous_batching():
    rows = [{"prompt": p, "sample": j, "response_len": n}
            for p, lens in enumerate([[3, 1], [2, 2]]) for j, n in enumerate(lens)]
    unit = StepCost({}, 0.0, 0, fallback_s=1.0)
    assert replay(rows, 4, 2, unit) == ({0: 2.0, 1: 1.0}, 2.0)  # the first token comes with the prefill
    assert replay(rows, 1, 2, unit) == ({0: 2.0, 1: 4.0}, 4.0)
    by_active = StepCost({"1": [1, 1.0], "3": [1, 3.0]}, 0.5, 1)
    assert by_active(2) == pytest.approx(2.0) and by_active(8) == 3.0 and by_active.refill == 0.5


def test_predict_without_iterations_is_a_user_error():
    with pytest.raises(UserError, match="no iterations"):
        predict_async({"cell": "sync", "iterations": []}, [], [], 1, 1)


def test_training_work_counts_padding_packing_and_attention():
    """The trainer runs each micro-batch as [rows, prompt + its longest response] (packed: one sequence), so
    a group with one long response costs its padded batch; with the model's shape, forward FLOPs."""
    from rlbench.core.costmodel.work import train_tokens, train_work

    rows = [{"prompt": 0, "sample": j, "prompt_len": 20, "response_len": n} for j, n in enumerate([10, 400, 5, 5])]
    assert train_tokens(rows, False) == 4 * 20 + 420
    assert train_work(rows, False, None) == train_tokens(rows, False)  # stated per-token costs: no padding
    assert train_work(rows, False, 2) == 2 * 420 + 2 * 25  # micro-batches [10, 400] and [5, 5]
    assert train_work(rows, False, 4) == 4 * 420
    assert train_work(rows, True, 4) == 20 + 420  # packed: the prompt once, then every response
    shape = {"matmul_params": 1000, "layers": 2, "heads": 4, "head_dim": 8}
    assert train_work(rows, False, 2, shape) == 2000 * (2 * 420 + 2 * 25) + 256 * (2 * 420 ** 2 + 2 * 25 ** 2)


def test_step_cost_beyond_the_measured_counts_follows_their_upper_half():
    """An async rollout worker holds the whole batch, a sync rank its share: above the largest measured count
    the step cost grows along the line through the upper half of the measured counts, never falls."""
    cost = StepCost({"1": [1, 5.0], "2": [1, 2.0], "4": [1, 4.0]}, 0.0, 0)
    assert cost(4) == 4.0 and cost(3) == 3.0 and cost(8) == pytest.approx(8.0)  # slope of (2, 2) and (4, 4)
    flat = StepCost({"2": [1, 3.0], "4": [1, 2.0]}, 0.0, 0)
    assert flat(16) == 2.0  # a falling line is not extrapolated


def test_split_weight_sync_crosses_the_host_on_an_accelerator_and_is_the_sync_copy_on_a_cpu():
    """Split pools publish the weights to shared host memory and load them back: on an accelerator each
    crossing is the weights' bytes over the measured host-copy bandwidth (a colocated rank's on-device copy
    says nothing about it); on a CPU, and where the probe is not recorded, the sync ranks' copy."""
    cell, events = sync_cell(0.01, 0.001, FLAT, ws=0.01)
    model = {"parameters": 500_000_000, "shape": {"matmul_params": 1000, "layers": 1, "heads": 1,
                                                  "head_dim": 8, "param_bytes": 2}}
    probe = {"host_copy_bytes_per_s": 5e9}
    cpu = predict_async({**cell, "model": model, "provenance": {"device": {"type": "cpu"}, "peak": probe}},
                        FLAT, events, 1, 1, overlap=False)
    assert cpu["split_weight_sync_s"] == pytest.approx(0.01)
    cuda = {**cell, "model": model, "provenance": {"device": {"type": "cuda"}, "peak": probe}}
    gpu = predict_async(cuda, FLAT, events, 1, 1, overlap=False)
    assert gpu["split_weight_sync_s"] == pytest.approx(0.2)  # 1 GB at 5 GB/s
    assert gpu["predicted_iter_s"] == pytest.approx(cpu["predicted_iter_s"] + 2 * (0.2 - 0.01))
    unprobed = {**cuda, "provenance": {"device": {"type": "cuda"}, "peak": {}}}
    assert predict_async(unprobed, FLAT, events, 1, 1)["split_weight_sync_s"] == pytest.approx(0.01)


def test_predicted_speedup_uses_the_measured_speedups_estimator():
    """Iterations whose TPSPD swings with their token counts (a long tail): the prediction is 0.9x of sync in
    half the iterations and 1.35-1.42x in the others; the ratio of the medians (1.30x) lands between other
    iterations than the paired ratios do (1.11x). Paired with the reference's iterations the prediction is
    what the verdict measures; with fewer iterations than an interval needs, the ratio of medians, as the
    verdict then states."""
    import math
    from types import SimpleNamespace

    from rlbench.core.costmodel.predict import predicted_speedup

    sync = [1000, 4000, 1100, 3900, 1200, 3800, 1000, 4000]
    pred = [0.9 * v for v in sync]
    pred[1] = pred[3] = pred[5] = pred[7] = 0.9 * 4000 * 1.5  # four iterations far faster than sync's median
    ms = [SimpleNamespace(iteration=k) for k in range(len(sync))]
    ref = dict(enumerate(sync))
    median_ratio = statistics.median(pred) / statistics.median(sync)
    paired = predicted_speedup(ms, pred, statistics.median(sync), ref)
    logs = sorted(math.log(p / s) for p, s in zip(pred, sync))
    assert paired == pytest.approx(math.exp(statistics.fmean(logs)))  # 8 values: none trimmed (trim_count)
    assert paired == pytest.approx(1.11, abs=0.01) and median_ratio == pytest.approx(1.30, abs=0.01)
    assert predicted_speedup(ms, pred, statistics.median(sync)) == pytest.approx(median_ratio)  # no pairs given
    few = predicted_speedup(ms[:3], pred[:3], statistics.median(sync[:3]), ref)
    assert few == pytest.approx(statistics.median(pred[:3]) / statistics.median(sync[:3]))
