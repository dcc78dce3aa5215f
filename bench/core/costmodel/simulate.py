"""Every schedule (DESIGN.md §1) on N rollout + M training devices, over batches of model.py, by the cost
model its record names (bench/core/schedules/):

- colocated: the data-parallel hybrid engine (sync), N + M colocated ranks, each generating and training
  its shard (prompts r, r + N + M, ...): weight sync + the slowest rank's rollout + training + optimizer step
  (rlbench.core.costmodel.predict.SyncMeasurements.sync_time).
- pools: N rollout workers (prompts i, i + N, ...), M trainer ranks taking groups as they arrive
  (j-th arrival to rank j mod M); 2 weight syncs + last rank done + step (.async_time);
  overlap=False is the barrier cell (training starts when the last group has arrived).
- bounded (k versions ahead; a record may pin k): bounded.py, from the same costs; with partial rollout
  (new weights taken mid-generation), partial.py.

TPSPD = batch tokens / (iteration seconds x (N + M)), the median over batches as the runner reports it.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from rlbench.core import schedules
from rlbench.core.costmodel.predict import SyncMeasurements
from rlbench.core.errors import UserError
from rlbench.core.schedules.spec import BOUNDED, MODEL_BOUNDED, MODEL_COLOCATED, PERIODIC, REFERENCE
from rlbench.core.costmodel.bounded import at_batch_start, bounded
from rlbench.core.costmodel.partial import mid_batch

SCHEDULES = tuple(schedules.SCHEDULES)  # every registered schedule, each by its record's cost model
# The schedules the sweeps and the paper setting compare, by their role.
REF, ASYNC, BOUNDED_K = (schedules.name_of(r) for r in (REFERENCE, PERIODIC, BOUNDED))


@dataclass
class SimResult:
    schedule: str
    rollout_devices: int  # sync: the colocated ranks are rollout_devices + train_devices
    train_devices: int
    devices: int  # TPSPD divisor: every device of the run
    tpspd: float  # tokens / (s * device): median over batches (bounded: steady-state rate)
    iter_s: float  # median seconds per iteration (bounded: steady-state mean)
    overlap: bool = True  # periodic_async: False = the barrier variant
    staleness: int | None = None  # bounded_async: k
    staleness_max: int = 0  # bounded_async: largest (trained version - behaviour version)
    partial_rollout: bool = False  # bounded_async: new weights taken mid-generation (partial.py)
    per_iteration_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def simulate(batches: list[SyncMeasurements], schedule: str, rollout_devices: int, train_devices: int,
             staleness: int = 1, overlap: bool = True, iterations: int | None = None,
             partial_rollout: bool = False, resume_kv: str = "recompute") -> SimResult:
    """Predict one schedule on rollout_devices + train_devices (sync: colocated on their sum).

    iterations: batches simulated by bounded_async (default: k + 1 warm-up batches, then every batch once;
    at least 4(k + 1)), cycling through the batches. partial_rollout (bounded_async): new weights taken
    mid-generation; resume_kv: recompute (prefill the sequences in flight again) or keep."""
    if schedule not in SCHEDULES:
        raise UserError(f"schedule {schedule!r}: allowed {', '.join(SCHEDULES)}")
    if rollout_devices < 1 or train_devices < 1:
        raise UserError(f"split {rollout_devices}+{train_devices}: each pool needs >= 1 device")
    if staleness < 0:
        raise UserError(f"staleness {staleness}: must be >= 0")
    if not batches:
        raise UserError("nothing to simulate: no batches")
    n, m, d = rollout_devices, train_devices, rollout_devices + train_devices
    spec = schedules.SCHEDULES[schedule]
    if spec.model == MODEL_BOUNDED:
        staleness = spec.pinned.get("max_staleness", staleness)
        worker = mid_batch(resume_kv == "recompute") if partial_rollout else at_batch_start
        tpspd, iter_s, stale, its = bounded(batches, n, m, staleness, iterations, worker)
        return SimResult(schedule, n, m, d, tpspd, iter_s, staleness=staleness, staleness_max=stale,
                         partial_rollout=partial_rollout, per_iteration_s=its)
    colocated = spec.model == MODEL_COLOCATED
    walls = [b.sync_time(d)[0] if colocated else b.async_time(n, m, overlap) for b in batches]
    tpspd = statistics.median(b.tokens / (w * d) for b, w in zip(batches, walls))
    return SimResult(schedule, n, m, d, tpspd, statistics.median(walls),
                     overlap=overlap or colocated, per_iteration_s=walls)
