"""Did the cells of one regime point pay the same CPU for the same work? A check on the measurement.

Every cell of a point trains the same samples (lengths are drawn per sample, seeded), and the
barrier and periodic-async cells also generate them with the same batch on one rollout worker. So
the CPU seconds per trained token of the training stages should agree between sync, barrier and
periodic-async, and the rollout worker's CPU seconds per generated token between barrier and
periodic-async. Where they do not, something other than the schedule changed the speed of the same
code between cells (other load on the machine, or the two cores slowing each other) and the
prediction, made from the sync cell's costs, cannot match the async cell: the spread says how far to
trust that point, not which is right. Other load shows a second way: a pinned worker that computes
but gets less CPU time than wall time was waiting for its core (descheduled), which CPU costs alone
do not see.
"""
from __future__ import annotations

from rlbench.core.record.stages import Role, Stage, role_of
from rlbench.analysis.data import CellData

SPREAD_PCT = 10.0  # beyond this, a point's cells did not run the same code at the same speed
# beyond this, a cell's workers waited for their cores: other work ran on the machine
BUSY_PCT = 5.0
TRAIN = (Stage.OLD_LOGPROB.value, Stage.REF_LOGPROB.value, Stage.UPDATE.value)
ROLLOUT = (Stage.ROLLOUT.value,)


def cpu_per_token(cell: CellData, stages: tuple[str, ...], tokens_key: str,
                  roles: tuple[str, ...]) -> float | None:
    """CPU seconds of `stages` on workers of `roles` over the measured iterations, per token of
    iterations[tokens_key] in those iterations (None when nothing was recorded)."""
    measured = {it["iteration"]: it for it in cell.measured()}
    cpu = sum(e.get("cpu") or 0.0 for e in cell.events
              if e["iteration"] in measured and e["stage"] in stages and role_of(e["worker"])
              in roles)
    tokens = sum(it.get(tokens_key) or 0 for it in measured.values())
    return cpu / tokens if cpu > 0 and tokens else None


def spread_pct(values: list[float | None]) -> float | None:
    """100 x (max / min - 1) over the values that exist (None with fewer than two)."""
    vs = [v for v in values if v]
    return 100 * (max(vs) / min(vs) - 1) if len(vs) >= 2 else None


def descheduled_pct(cell: CellData) -> float | None:
    """100 x (1 - CPU / wall) over the compute stages (rollout and training) of every worker in the
    measured iterations. A worker is one single-thread process pinned to its own core, so while it
    computes its wall time is its CPU time; what exceeds it is time the core ran something else
    (another job on the machine). Waiting stages (queue_wait, the optimizer step's all-reduce) are
    left out."""
    measured = {it["iteration"] for it in cell.measured()}
    # the pinned ones, not the driver
    workers = (Role.COLOCATED.value, Role.TRAINER.value, Role.ROLLOUT.value)
    events = [e for e in cell.events if e["iteration"] in measured and e["stage"] in (*TRAIN,
                                                                                      *ROLLOUT)
              and e.get("cpu") is not None and role_of(e["worker"]) in workers]
    wall = sum(e["end"] - e["start"] for e in events)
    return max(0.0, 100 * (1 - sum(e["cpu"] for e in events) / wall)) if wall > 0 else None


def point_spread(sync: CellData, barrier: CellData | None, overlap: CellData) -> dict:
    """{"train_cost_spread_pct", "rollout_cost_spread_pct", "descheduled_pct"}: training CPU per
    trained token across the point's cells; the rollout worker's CPU per generated token, barrier vs
    periodic-async; the largest share of compute time a cell of the point waited for its core."""
    trainers = (Role.COLOCATED.value, Role.TRAINER.value)
    cells = [c for c in (sync, barrier, overlap) if c is not None]
    train = [cpu_per_token(c, TRAIN, "tokens", trainers) for c in cells]
    roll = [cpu_per_token(c, ROLLOUT, "response_tokens",
                          (Role.ROLLOUT.value,)) for c in (barrier, overlap) if c]
    waits = [v for v in map(descheduled_pct, cells) if v is not None]
    return {"train_cost_spread_pct": spread_pct(train), "rollout_cost_spread_pct": spread_pct(roll),
            "descheduled_pct": max(waits) if waits else None}
