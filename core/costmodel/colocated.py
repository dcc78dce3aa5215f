"""sync's term of the cost model: N + M colocated ranks, each generating and training its shard
(prompts r, r + N + M, ...): weight sync + the slowest rank's rollout and training + the optimizer
step (rlbench.core.costmodel.predict.SyncMeasurements.sync_time)."""
from __future__ import annotations

from rlbench.core.costmodel.sim_result import SimResult, median_rate


def simulate(batches, schedule: str, n: int, m: int, **_) -> SimResult:
    walls = [b.sync_time(n + m)[0] for b in batches]
    return median_rate(schedule, batches, n, m, walls)
