"""periodic_async's term of the cost model: N rollout workers (prompts i, i + N, ...), M trainer
ranks taking groups as they arrive (the j-th arrival to rank j mod M); 2 weight syncs + the last
rank done + the step (rlbench.core.costmodel.predict.SyncMeasurements.async_time). overlap=False is
the barrier cell: training starts when the last group has arrived."""
from __future__ import annotations

from rlbench.core.costmodel.sim_result import SimResult, median_rate


def simulate(batches, schedule: str, n: int, m: int, overlap: bool = True, **_) -> SimResult:
    walls = [b.async_time(n, m, overlap) for b in batches]
    return median_rate(schedule, batches, n, m, walls, overlap=overlap)
