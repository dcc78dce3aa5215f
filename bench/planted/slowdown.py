"""Planted regressions: RLBENCH_SLOW makes chosen stages of chosen cells slower, on purpose.

This is how the sensitivity of `rlbench check` is measured (bench/baselines/README.md): plant a
known slowdown, see whether check flags it. Like RLBENCH_FAULT it is opt-in and off unless the
variable is set.

    RLBENCH_SLOW=TARGET:FRACTION[@CELL][,TARGET:FRACTION[@CELL]...]

TARGET    a stage name (update, weight_sync, handoff, queue_wait, rollout, reward, old_logprob,
          ref_logprob, advantage, optimizer_step), `decode` (one decode step of the built-in
          sampler, code every cell shares: the slowdown `rlbench check --against` must see), or an
          alias: `queue` = handoff (the queue path's work: the async consumer opening each group it
          takes off the queue; queue_wait is its idle wait), `packing` = the trainer stages that run
          the shared-prompt layout (update, old_logprob, ref_logprob) in cells with shared_prompt on
          (no effect elsewhere), `work` = every working stage (all but queue_wait): with @CELL, a
          regression confined to one cell's work.
FRACTION  extra time as a fraction of the stage's own measured duration, 0 < FRACTION <= 10.
CELL      a cell name (`+tri_model`) or a schedule (`sync`, `periodic_async`, `bounded_async`);
          without it, every cell.

The cell process resolves the spec once (`activate`) into RLBENCH_SLOW_STAGES=stage=fraction,...,
which its worker processes inherit; `Recorder.stage` then busy-waits (bench/planted/burn.py) at the
end of each such stage, inside it (a busy-wait, not a sleep: a real regression costs CPU too):
`fraction x` the stage's CPU time of CPU time for a working stage (the stage does that much more
work), `fraction x` its wall time for the queue wait (an idle stage, whose cost is waiting).
"""
from __future__ import annotations

import os

from rlbench.core.errors import UserError
from rlbench.core import hooks
from rlbench.planted import burn
from rlbench.planted.burn import ACTIVE_ENV
from rlbench.core.record.stages import Stage

ENV = "RLBENCH_SLOW"
# every timed stage of the work
STAGES = tuple(s.value for s in Stage if s not in (Stage.EVAL, Stage.PAUSED))
PACKED_STAGES = ("update", "old_logprob", "ref_logprob")
STEPS = ("decode",)  # steps inside a stage, slowed where they run (engines/rollout/sampler.py)
ALIASES = {"queue": ("handoff",), "packing": PACKED_STAGES,
           "work": tuple(s for s in STAGES if s != Stage.QUEUE_WAIT.value)}
MAX_FRACTION = 10.0


def parse(spec: str) -> list[tuple[str, float, str | None]]:
    """'update:0.1@periodic_async,packing:0.2' -> [('update', 0.1, 'periodic_async'), ('packing',
    0.2, None)]; anything malformed is a UserError that says what is allowed."""
    out = []
    for raw in filter(None, (p.strip() for p in spec.split(","))):
        head, _, cell = raw.partition("@")
        target, _, frac = head.partition(":")
        target = target.strip()
        if target not in (*STAGES, *STEPS, *ALIASES):
            raise UserError(f"{ENV}={spec!r}: unknown target {target!r} in {raw!r}; allowed: "
                            f"{', '.join((*STAGES, *STEPS, *ALIASES))}")
        try:
            value = float(frac)
        except ValueError:
            value = float("nan")
        if not 0.0 < value <= MAX_FRACTION:
            raise UserError(f"{ENV}={spec!r}: {raw!r} needs TARGET:FRACTION with 0 < FRACTION <= "
                            f"{MAX_FRACTION:g} (e.g. update:0.10@periodic_async)")
        if "@" in raw and not cell.strip():
            raise UserError(f"{ENV}={spec!r}: {raw!r} has '@' but no cell or schedule after it")
        out.append((target, value, cell.strip() or None))
    return out


def stages_for(spec: str, cell: str, switches: dict) -> dict[str, float]:
    """The stages this cell slows down, {stage: fraction}; several entries on one stage add up."""
    plan: dict[str, float] = {}
    for target, frac, sel in parse(spec):
        if sel is not None and sel not in (cell, switches.get("schedule")):
            continue
        if target == "packing" and not switches.get("shared_prompt"):
            continue
        for stage in ALIASES.get(target, (target,)):
            plan[stage] = plan.get(stage, 0.0) + frac
    return plan


def activate(cell: str, switches: dict) -> dict[str, float]:
    """In a cell process, before its workers start: resolve RLBENCH_SLOW for this cell into
    RLBENCH_SLOW_STAGES (inherited by the workers). Returns the plan (recorded in the results)."""
    plan = stages_for(os.environ.get(ENV, ""), cell, switches)
    if plan:
        os.environ[ACTIVE_ENV] = ",".join(f"{s}={f}" for s, f in plan.items())
    else:
        os.environ.pop(ACTIVE_ENV, None)
    burn.forget()
    hooks.reset()  # the timer's hooks are registered again from the environment just set
    return plan
