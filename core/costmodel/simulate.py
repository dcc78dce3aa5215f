"""Every schedule on N rollout + M training devices, over batches of per-device costs measured in a
sync cell (rlbench.core.costmodel.predict.SyncMeasurements), each by the term of the cost model its
record's `model` names (TERMS: colocated.py, pools.py, bounded.py), so a schedule with a new model
adds its term there and one line to TERMS.

TPSPD = batch tokens / (iteration seconds x (N + M)), the median over batches as the runner reports
it, or for a schedule whose iterations overlap (bounded staleness) the steady-state rate.
"""
from __future__ import annotations

import statistics
from dataclasses import replace

from rlbench.core import schedules
from rlbench.core.costmodel import bounded, colocated, pools
from rlbench.core.costmodel.link import NodeLayout
from rlbench.core.costmodel.predict import SyncMeasurements
from rlbench.core.costmodel.sim_result import SimResult, median_rate
from rlbench.core.errors import UserError
from rlbench.core.schedules.spec import (BOUNDED, MODEL_BOUNDED, MODEL_COLOCATED, MODEL_POOLS,
                                         PERIODIC, REFERENCE)

SCHEDULES = tuple(schedules.SCHEDULES)  # every registered schedule, each by its record's cost model
# The schedules the sweeps and the paper setting compare, by their role.
REF, ASYNC, BOUNDED_K = (schedules.name_of(r) for r in (REFERENCE, PERIODIC, BOUNDED))
# A record's cost model -> its term: f(batches, schedule, rollout_devices, train_devices,
# staleness=, overlap=, iterations=, partial_rollout=, resume_kv=) -> SimResult.
TERMS = {MODEL_COLOCATED: colocated.simulate, MODEL_POOLS: pools.simulate,
         MODEL_BOUNDED: bounded.simulate}
__all__ = ["SCHEDULES", "REF", "ASYNC", "BOUNDED_K", "TERMS", "SimResult", "median_rate",
           "simulate", "with_link"]


def simulate(batches: list[SyncMeasurements], schedule: str, rollout_devices: int,
             train_devices: int,
             staleness: int = 1, overlap: bool = True, iterations: int | None = None,
             partial_rollout: bool = False, resume_kv: str = "recompute",
             layout: NodeLayout | None = None) -> SimResult:
    """Predict one schedule on rollout_devices + train_devices (sync: colocated on their sum).

    iterations: batches simulated by bounded_async (default: k + 1 warm-up batches, then every batch
    once; at least 4(k + 1)), cycling through the batches. partial_rollout (bounded_async): new
    weights taken mid-generation; resume_kv: recompute (prefill the sequences in flight again) or
    keep. layout: the devices on nodes and the link between them (costmodel/link.py), whose terms
    are added to every iteration; None: one node."""
    if schedule not in SCHEDULES:
        raise UserError(f"schedule {schedule!r}: allowed {', '.join(SCHEDULES)}")
    if rollout_devices < 1 or train_devices < 1:
        raise UserError(f"split {rollout_devices}+{train_devices}: each pool needs >= 1 device")
    if staleness < 0:
        raise UserError(f"staleness {staleness}: must be >= 0")
    if not batches:
        raise UserError("nothing to simulate: no batches")
    spec = schedules.SCHEDULES[schedule]
    res = TERMS[spec.model](batches, schedule, rollout_devices, train_devices,
                            staleness=spec.pinned.get("max_staleness", staleness),
               overlap=overlap, iterations=iterations, partial_rollout=partial_rollout,
                            resume_kv=resume_kv)
    if layout is not None:
        res = with_link(res, batches, layout.terms(spec.colocated, rollout_devices, train_devices))
    return res


def with_link(res: SimResult, batches: list[SyncMeasurements],
              terms: dict[str, float]) -> SimResult:
    """res with the link's seconds added to every iteration: TPSPD again from the longer walls where
    they are the batches' own (median_rate), else scaled by the longer mean iteration (a
    steady-state rate)."""
    extra = sum(terms.values())
    walls = [w + extra for w in res.per_iteration_s]
    if len(walls) == len(batches):
        tpspd = statistics.median(b.tokens / (w * res.devices) for b, w in zip(batches, walls))
    else:
        tpspd = res.tpspd * res.iter_s / (res.iter_s + extra) if res.iter_s > 0 else res.tpspd
    return replace(res, tpspd=tpspd, iter_s=res.iter_s + extra, per_iteration_s=walls,
                   link_s=dict(terms))
