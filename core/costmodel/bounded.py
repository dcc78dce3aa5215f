"""Bounded staleness k (engines/schedules/bounded_async/engine.py) from the report model's
per-device costs.

Batch b is dealt to the N rollout workers as periodic-async deals it (prompts i, i + N, ...). Worker
i starts its shard when it is free and weights of version >= b - k exist (AReaL's admission rule,
batches in order); if a newer version exists than it holds, it first loads it (one weight sync). Its
groups arrive as the continuous-batching replay of the measured lengths finishes them
(predict.replay). The M trainer ranks take batch b's groups in arrival order (j-th to rank j mod M)
once version b exists, then one optimizer step, then the trainer publishes version b + 1 (one weight
sync). k = 0 is periodic-async iteration by iteration. Measured over the steady state (after k + 1
batches), which covers every batch once by default: a rate (tokens / span), where sync and
periodic-async give the median over batches.
"""
from __future__ import annotations

import bisect

from rlbench.core.costmodel.predict import SyncMeasurements
from rlbench.core.costmodel.sim_result import SimResult
from rlbench.core.costmodel.partial import mid_batch


def at_batch_start(batch: SyncMeasurements, i: int, n: int, start: float, held: int,
                   ready: list[float]) -> tuple[list[tuple[float, float]], float, int, int]:
    """Worker i of n generates its shard of `batch` from `start`, first loading the newest published
    version when it holds an older one (one weight sync). -> (arrivals [(time, train seconds of the
    group)], when it is free again, the version its batch starts on, the version it holds at the
    end)."""
    latest = bisect.bisect_right(ready, start) - 1  # ready: publication times, in version order
    if latest > held:
        start, held = start + batch.split_ws, latest
    got, roll = batch.arrivals(i, n)
    return [(start + at, cost) for at, cost in got], start + roll, held, held


def bounded(batches: list[SyncMeasurements], n: int, m: int, k: int, iterations: int | None = None,
            worker=at_batch_start) -> tuple[float, float, int, list[float]]:
    """-> (steady-state TPSPD on n + m devices, mean iteration seconds, largest staleness, iteration
    seconds). worker: how a rollout worker generates a batch (at_batch_start; partial.py's mid_batch
    loads mid-batch)."""
    # the steady state sees every batch
    total = iterations or max(len(batches) + k + 1, 4 * (k + 1))
    warm = min(k + 1, total - 2)
    ready = [0.0]  # ready[v]: when weights of version v are published
    free, held = [0.0] * n, [0] * n  # per rollout worker: free from, version held
    stale, tokens = [], 0
    for b in range(total):
        batch = batches[b % len(batches)]
        gate = ready[max(0, b - k)]
        arrivals = []
        for i in range(n):
            got, free[i], first, held[i] = worker(batch, i, n, max(free[i], gate), held[i], ready)
            stale.append(b - first)
            arrivals += got
        ranks = [ready[b]] * m
        for j, (at, cost) in enumerate(sorted(arrivals)):
            ranks[j % m] = max(ranks[j % m], at) + cost
        ready.append(max(ranks) + batch.opt + batch.split_ws)
        if b >= warm:
            tokens += batch.tokens
    span = ready[total] - ready[warm]
    its = [ready[v + 1] - ready[v] for v in range(warm, total)]
    return tokens / (span * (n + m)), span / len(its), max(stale[warm * n:], default=0), its


def simulate(batches: list[SyncMeasurements], schedule: str, n: int, m: int, staleness: int = 1,
             iterations: int | None = None, partial_rollout: bool = False,
             resume_kv: str = "recompute",
             **_) -> SimResult:
    """bounded_async's (and one_step_off's, k = 1) term of the cost model; with partial rollout,
    partial.py's worker, which takes new weights mid-batch."""
    worker = mid_batch(resume_kv == "recompute") if partial_rollout else at_batch_start
    tpspd, iter_s, stale, its = bounded(batches, n, m, staleness, iterations, worker)
    return SimResult(schedule, n, m, n + m, tpspd, iter_s, staleness=staleness, staleness_max=stale,
                     partial_rollout=partial_rollout, per_iteration_s=its)
