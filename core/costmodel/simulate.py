"""Every schedule on N rollout + M training devices, over batches of per-device costs measured in a sync
cell (rlbench.core.costmodel.predict.SyncMeasurements), each by its own term of the cost model: the record
of a schedule names it (engines/schedules/<name>/cost.py), so adding a schedule adds its term there.

TPSPD = batch tokens / (iteration seconds x (N + M)), the median over batches as the runner reports it,
or for a schedule whose iterations overlap (bounded staleness) the steady-state rate.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from rlbench.core import schedules
from rlbench.core.costmodel.predict import SyncMeasurements
from rlbench.core.errors import UserError
from rlbench.core.schedules.spec import BOUNDED, PERIODIC, REFERENCE

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
    spec = schedules.SCHEDULES[schedule]
    term = spec.cost_function()  # the schedule's own term (engines/schedules/<name>/cost.py)
    return term(batches, schedule, rollout_devices, train_devices, staleness=spec.pinned.get("max_staleness", staleness),
                overlap=overlap, iterations=iterations, partial_rollout=partial_rollout, resume_kv=resume_kv)


def median_rate(schedule: str, batches: list[SyncMeasurements], n: int, m: int, walls: list[float],
                overlap: bool = True) -> SimResult:
    """A schedule whose iterations do not overlap: TPSPD = the median over batches of tokens / (wall x
    devices), as the runner reports it."""
    d = n + m
    tpspd = statistics.median(b.tokens / (w * d) for b, w in zip(batches, walls))
    return SimResult(schedule, n, m, d, tpspd, statistics.median(walls), overlap=overlap, per_iteration_s=walls)
