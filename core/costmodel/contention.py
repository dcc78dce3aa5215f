"""A proposal for the term core/costmodel/predict.py leaves out: the two cores slowing each other.

On a 2-core CPU, a stage runs slower while the other core also computes (shared caches, memory
bandwidth, SMT siblings): one run measured rollout and training about 35% slower together than
alone. The sync cell's costs are mostly "together" costs (both ranks compute at once), while
periodic-async's trainer often runs alone (before the first group arrives, after the last). Nothing
here is fitted to an async cell; everything comes from the sync cell's own events:

1. Estimate kappa (a stage progresses at 1 / (1 + kappa) of its alone speed while the other core
   computes): for every heavy training stage of a sync rank (old_logprob, ref_logprob, update), its
   tokens per second (the rank's shard over the stage's seconds) and f, the share of its span during
   which the other rank was in a compute stage. Under that rate model the alone work is
   seconds x (1 - s f) with s = kappa / (1 + kappa), so tokens per second = p (1 - s f) exactly: per
   stage kind, least squares of it on f gives p and s, kappa = s / (1 - s), the stage kinds'
   estimates weighted by their seconds. Ranks finish their rollouts at different times, so f spans
   0..1 within a sync iteration; where it does not (MIN_SPREAD), kappa is not identifiable and the
   proposal says so instead of guessing.
2. Predict 1 rollout worker + 1 trainer rank with it: a cost the sync cell measured over stages with
   seconds-weighted mean overlap f_bar is alone cost / (1 - s f_bar) (exact for sums of seconds);
   the async iteration is replayed in alone-seconds, each worker progressing at 1 / (1 + kappa)
   while the other also computes and at 1 alone.

Guarded: a separate column beside the prediction (tables.speedup_frame), only for the 1 + 1 split of
2 devices, never replacing the model the 15% / 10% checks are made on.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np

from rlbench.core.costmodel.decode import StepCost, replay
from rlbench.core.costmodel.predict import SyncMeasurements, measurements, predicted_speedup
from rlbench.core.costmodel.work import train_work
from rlbench.core.record.stages import PER_SAMPLE_TRAIN_STAGES, Role, Stage, role_of

HEAVY = (Stage.OLD_LOGPROB.value, Stage.REF_LOGPROB.value, Stage.UPDATE.value)
COMPUTE = {Stage.ROLLOUT.value, *PER_SAMPLE_TRAIN_STAGES}
MIN_SPREAD = 0.3  # f must span at least this much (max - min) for a slope to mean anything
MIN_EVENTS = 4


def overlap_share(e: dict, others: list[dict]) -> float:
    """Share of e's span during which some event of `others` (the other rank's compute stages)
    ran."""
    span = e["end"] - e["start"]
    if span <= 0:
        return 0.0
    cover = sorted((max(o["start"], e["start"]), min(o["end"], e["end"])) for o in others
                   if o["end"] > e["start"] and o["start"] < e["end"])
    total, reach = 0.0, e["start"]
    for a, b in cover:  # union of the overlapping intervals
        a = max(a, reach)
        if b > a:
            total, reach = total + b - a, b
    return total / span


def training_points(events: list[dict], samples: list[dict], iterations: set[int], work=None):
    """(stage, f, work per second) of every heavy training stage of the sync ranks in `iterations`;
    work: rows -> units (SyncMeasurements.work: padded FLOPs), default the real tokens."""
    work = work or (lambda rows: train_work(rows, False, None))
    ranks = sorted({e["worker"] for e in events if role_of(e["worker"]) == Role.COLOCATED.value})
    n, out = len(ranks), []
    for k in iterations:
        mine = [e for e in events if e["iteration"] == k and e["worker"] in ranks]
        rows = [s for s in samples if s["iteration"] == k]
        for r, w in enumerate(ranks):
            tokens = work([s for s in rows if s["prompt"] % n == r])
            others = [o for o in mine if o["worker"] != w and o["stage"] in COMPUTE]
            for e in mine:
                if e["worker"] == w and e["stage"] in HEAVY and tokens and e["end"] > e["start"]:
                    out.append((e["stage"], overlap_share(e, others),
                                tokens / (e["end"] - e["start"])))
    return out


def estimate_kappa(points: list[tuple[str, float, float]]) -> dict:
    """-> {"kappa": float | None, "reason": why None, "f_mean": mean overlap of the points,
    "points": n}."""
    by_stage = defaultdict(list)
    for stage, f, rate in points:
        by_stage[stage].append((f, rate))
    f_all = [f for _, f, _ in points]
    base = {"points": len(points), "f_mean": float(np.mean(f_all)) if f_all else None}
    if len(points) < MIN_EVENTS or max(f_all) - min(f_all) < MIN_SPREAD:
        return {**base, "kappa": None,
                "reason": f"the sync ranks' training overlapped uniformly (f spread "
                f"{(max(f_all) - min(f_all)) if f_all else 0:.2f} < {MIN_SPREAD}): not "
                f"identifiable"}
    estimates, weights = [], []
    for fr in by_stage.values():
        f, rate = np.array([p[0] for p in fr]), np.array([p[1] for p in fr])
        if len(fr) < 2 or np.ptp(f) < MIN_SPREAD:
            continue
        q, p = np.polyfit(f, rate, 1)  # rate = p - p s f
        if p > 0:
            s = min(max(-q / p, 0.0), 0.5)  # kappa in [0, 1]
            estimates.append(s / (1.0 - s))
            weights.append(float((1.0 / rate).sum()))  # seconds per token: the stage kind's weight
    if not estimates:
        return {**base, "kappa": None, "reason": "no training stage kind with enough spread in f"}
    return {**base, "kappa": float(np.average(estimates, weights=weights)), "reason": None}


def async_time_contended(m: SyncMeasurements, kappa: float | tuple[float, float], f_train: float,
                         f_roll: float,
                         overlap: bool = True) -> float:
    """Predicted periodic-async wall time on 1 rollout worker + 1 trainer rank with the contention
    term.

    kappa: one for both sides, or (decode's, training's) as the calibration probe measures them.
    f_train, f_roll: mean overlap under which the sync cell measured its training and decode
    costs."""
    k_roll, k_train = kappa if isinstance(kappa, tuple) else (kappa, kappa)
    s_roll, s_train = k_roll / (1.0 + k_roll), k_train / (1.0 + k_train)
    # measured (mixed) -> alone costs
    roll_scale, train_scale = 1.0 - s_roll * f_roll, 1.0 - s_train * f_train
    cost = m.cost
    alone = StepCost({}, 0.0, 0, fallback_s=1.0)
    alone.bs, alone.cost = cost.bs, [c * roll_scale for c in cost.cost]
    alone.refill, alone.fallback = cost.refill * roll_scale, (cost.fallback or 0.0) * roll_scale
    # arrival of each group, in alone-seconds of rollout work
    done, _ = replay(m.samples, m.slots, m.g, alone)
    groups = defaultdict(list)
    for s in m.samples:
        groups[s["prompt"]].append(s)
    jobs = sorted((at, train_scale * m.train_s(groups[p])) for p, at in done.items())
    last = jobs[-1][0] if jobs else 0.0
    if not overlap:  # barrier: rollout alone, then training alone
        return 2 * m.split_ws + last + sum(j for _, j in jobs) + m.opt
    return 2 * m.split_ws + _two_workers(jobs, last, k_roll, k_train) + m.opt


def _two_workers(jobs: list[tuple[float, float]], rollout_work: float, k_roll: float,
                 k_train: float) -> float:
    """Wall time until the trainer has trained every job (arrival in rollout work-seconds, alone
    seconds), the rollout worker slowed to 1 / (1 + k_roll), the trainer to 1 / (1 + k_train), while
    the other also computes."""
    # time, rollout work done, next job, trainer work left on its job
    t, done_r, i, left = 0.0, 0.0, 0, 0.0
    busy = False
    while True:
        if not busy and i < len(jobs) and jobs[i][0] <= done_r + 1e-12:
            busy, left, i = True, jobs[i][1], i + 1
        rolling = done_r < rollout_work - 1e-12
        if not busy and not rolling:
            return t
        both = busy and rolling
        r_rate, t_rate = (1.0 / (1.0 + k_roll), 1.0 / (1.0 + k_train)) if both else (1.0, 1.0)
        to_arrival = (jobs[i][0] - done_r) / r_rate if rolling and i < len(jobs) else float("inf")
        to_rollout_end = (rollout_work - done_r) / r_rate if rolling else float("inf")
        to_job = left / t_rate if busy else float("inf")
        dt = min(to_arrival if not busy else float("inf"), to_rollout_end, to_job)
        t += dt
        done_r = min(rollout_work, done_r + dt * r_rate) if rolling else done_r
        if busy:
            left -= dt * t_rate
            if left <= 1e-12:
                busy = False


def mean_overlaps(events: list[dict], iterations: set[int]) -> tuple[float, float]:
    """(training, rollout): the sync ranks' overlap share f of those stages with the other rank's
    compute, weighted by seconds, as the sync costs (seconds summed, then divided) average it."""
    ranks = sorted({e["worker"] for e in events if role_of(e["worker"]) == Role.COLOCATED.value})
    sums = {"train": [0.0, 0.0], "roll": [0.0, 0.0]}
    for e in events:
        if (
            e["worker"] not in ranks
            or e["iteration"] not in iterations
            or e["stage"] not in COMPUTE
        ):
            continue
        others = [o for o in events if o["iteration"] == e["iteration"] and o["worker"] in ranks
                  and o["worker"] != e["worker"] and o["stage"] in COMPUTE]
        d = e["end"] - e["start"]
        acc = sums["roll" if e["stage"] == Stage.ROLLOUT.value else "train"]
        acc[0] += d * overlap_share(e, others)
        acc[1] += d
    return tuple(a / b if b else 0.0 for a, b in (sums["train"], sums["roll"]))


def predict_contended(sync_cell: dict, samples: list[dict], events: list[dict],
                      overlap: bool = True,
                      devices: int | None = None, reference_tpspd: float | None = None,
                      probe: dict | None = None,
                      reference_iterations: dict[int, float] | None = None) -> dict:
    """The 1 + 1 prediction with the contention term (module docstring), from a measured sync cell.

    probe: the run's contention_probe.json (bench/experiments/regime/probe.py): decode's and
    training's kappa measured alone vs together, used instead of the estimate from the sync cell's
    events. -> kappa (None, with reason, where neither can tell; a (decode, train) pair from the
    probe), its source, f_train and f_roll, and predicted_speedup (None without kappa), relative to
    reference_tpspd (default: the sync cell's), paired by iteration with reference_iterations where
    given (predict.predicted_speedup)."""
    ms = measurements(sync_cell, samples, events)
    its = {it["iteration"] for it in sync_cell["iterations"] if not it.get("warmup")} \
        or {it["iteration"] for it in sync_cell["iterations"]}
    measured = probe and all((probe.get(k) or {}).get("kappa") is not None for k in ("decode",
                                                                                     "train"))
    est = ({"kappa": (probe["decode"]["kappa"], probe["train"]["kappa"]),
            "reason": None} if measured
           else estimate_kappa(training_points(events, samples, its, ms[0].work)))
    f_train, f_roll = mean_overlaps(events, its)
    out = {"kappa": est["kappa"], "reason": est["reason"], "f_train": f_train, "f_roll": f_roll,
           "kappa_source": "probe" if measured else "sync cell", "predicted_speedup": None}
    if est["kappa"] is None:
        return out
    d = devices or int(sync_cell.get("devices") or ms[0].n)
    ref = reference_tpspd or statistics.median(it["tpspd"] for it in sync_cell["iterations"]
                                               if it["iteration"] in its)
    tpspd = [m.tokens / (async_time_contended(m, est["kappa"], f_train, f_roll,
                                              overlap) * d) for m in ms]
    return {**out, "predicted_speedup": predicted_speedup(ms, tpspd, ref, reference_iterations)}
