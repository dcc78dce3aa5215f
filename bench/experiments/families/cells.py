"""`--ablation families`: the async families side by side on the same devices, as a ladder.

Each rung adds one thing to the one before, so the ratio of consecutive TPSPDs says what that thing
buys (docs/architecture/schedules.md, 'The families ladder'; README.md beside this file):

    sync            the reference: colocated ranks, each generating then training its shard
    barrier         periodic-async's device split (rollout pool + training pool), training only
                    after the
                    last group has arrived                                   -> factor "split"
    periodic-async  training overlaps generation inside the iteration, on-policy   -> "overlap"
    one-step-off    the next batch is generated while this one trains (k = 1)      -> "k=1"
    k2              bounded staleness, rollout up to 2 versions ahead              -> "k=2"
    k2_partial      k2 with partial rollout: new weights taken mid-sequence        -> "partial
        rollout"

The terminal and the report print the factors as one line; the two staleness rungs form one factor,
"staleness" (k2 / periodic-async), with each step in brackets:
"split 0.76× · overlap 1.39× · staleness 1.10× (k=1 1.05×, k=2 1.05×) · partial rollout 1.20×". The
factors multiply to the last rung's speedup over sync.

The schedules come from their records (core/schedules/: the role each plays); what is computed from
a run's result files is analysis.py's, report.py renders it. Import-light: `rlbench --help` reads
the cells.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlbench.core.schedules import by_role
from rlbench.core.schedules.spec import BOUNDED, ONE_STEP, PERIODIC, REFERENCE

_REF, _ASYNC, _ONE, _BOUNDED = (by_role(r).name for r in (REFERENCE, PERIODIC, ONE_STEP, BOUNDED))


@dataclass(frozen=True)
class Rung:
    cell: str  # the ablation cell's name
    # what the cell sets (bench/run/ablation.py lays them over every switch's "off" value)
    switches: dict
    factor: str | None  # the name of what it adds over the rung before; None: the reference
    adds: str  # the same in words, for tables


RUNGS: tuple[Rung, ...] = (
    Rung(_REF, {"schedule": _REF}, None, "the reference: colocated ranks, generate then train"),
    Rung("barrier", {"schedule": _ASYNC, "overlap": False}, "split",
         "the device split alone: rollout and training pools, training after the last group"),
    Rung(_ASYNC, {"schedule": _ASYNC}, "overlap", "training overlaps generation, on-policy"),
    Rung(_ONE, {"schedule": _ONE}, "k=1",
         "one-step-off: the next batch generated while this one trains"),
    Rung("k2", {"schedule": _BOUNDED, "max_staleness": 2}, "k=2",
         "bounded staleness: up to 2 versions ahead"),
    Rung("k2_partial", {"schedule": _BOUNDED, "max_staleness": 2, "partial_rollout": True},
         "partial rollout",
         "k=2 with partial rollout: new weights taken mid-sequence, in-flight sequences continued"),
)
CELLS: list[tuple[str, dict]] = [(r.cell, r.switches) for r in RUNGS]
# The ladder line's factors: (its name, the rung factors it multiplies). Staleness is one factor, as
# the issue writes the ladder, with its two steps shown beside it.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("split", ("split",)), ("overlap", ("overlap",)), ("staleness", ("k=1", "k=2")),
    ("partial rollout", ("partial rollout",)))
ABOUT = ("the async families on the same devices: sync, barrier (split), periodic-async (overlap), "
         "one-step-off (k=1), k=2, k=2 + partial rollout; the ladder of factors")


def ablations() -> dict[str, list[tuple[str, dict]]]:
    """`--ablation families`: the rungs' cells, in ladder order."""
    return {"families": list(CELLS)}
