"""The verdict: what a run answers, the first thing its reader sees (terminal, summary.md,
report.html).

Per periodic-async cell beside its sync twin (speedup.speedup_frame): the measured and predicted
speedup, the measured one's 95% interval and from it whether periodic asynchrony wins, loses or is
even (analysis/intervals.py), sync's rollout share and, where a barrier cell ran, the two factors
the speedup multiplies to (device split x overlap, speedup.attribution). Where the run has a regime
map or a families ladder, what would change the answer: the map's crossover with its range or the
first rung of the ladder that pays by its interval (the analysis of each experiment it is given: the
harness passes the registry, bench/experiments/__init__.py). Computed here; reports/verdict_text.py
renders it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rlbench.analysis import intervals
from rlbench.analysis.intervals import Ratio
from rlbench.analysis.speedup import attribution
from rlbench.core.experiments.spec import ExperimentSpec

if TYPE_CHECKING:  # import-light
    import pandas as pd


@dataclass(frozen=True)
class Comparison:
    """One periodic-async cell against its sync twin; split and overlap only where a barrier cell
    ran (split: barrier / sync, overlap: async / barrier, measured; split x overlap = measured).
    interval: the measured speedup's (its value is `measured`)."""
    async_cell: str
    sync_cell: str
    measured: float | None
    predicted: float | None
    rollout_share: float | None  # of the sync cell's iteration, spent generating
    barrier: str | None = None
    split: float | None = None
    overlap: float | None = None
    interval: Ratio = field(default_factory=lambda: Ratio(None))
    # predicted from a sync cell without the cell's optimisations (speedup_frame)
    schedule_only: bool = False

    @property
    def outcome(self) -> str | None:
        return intervals.outcome(self.measured, self.interval.low, self.interval.high,
                                 self.interval.basis)


@dataclass(frozen=True)
class Verdict:
    comparisons: list[Comparison]
    # experiment name -> what it says would change the answer (a regime map's crossover, a families
    # ladder's first paying rung), where the run is that experiment's
    answers: dict = field(default_factory=dict)
    # (cell, speedup, reference) where nothing is compared
    fastest: tuple[str, float, str] | None = None
    # what it was computed with, in registry order (their words)
    experiments: tuple[ExperimentSpec, ...] = ()


def comparisons(sp: pd.DataFrame, attribution: list[dict]) -> list[Comparison]:
    """One Comparison per periodic-async cell with overlap (sp: speedup_frame rows; attribution: its
    attribution() rows, which add the barrier's split and the overlap)."""
    by_async = {a["async"]: a for a in attribution}
    out = []
    for r in sp.to_dict("records") if len(sp) else []:
        if not r["overlap"]:
            continue
        a = by_async.get(r["cell"], {})
        out.append(Comparison(r["cell"], r["predicted_from"], _value(r["measured_speedup"]),
                              _value(r["predicted_speedup"]), _value(r["rollout_share_of_sync"]),
                              a.get("barrier"), _value(a.get("split_measured")),
                              _value(a.get("overlap_measured")),
                              intervals.from_columns(r, "measured_speedup", "measured"),
                              bool(r["schedule_only"])))
    return out


def fastest(summary: pd.DataFrame, reference: str) -> tuple[str, float, str] | None:
    """(cell, speedup over the reference, reference) of the fastest other cell, for a run that
    compares no periodic-async cell with sync; None with fewer than two measured cells."""
    rows = [r for r in summary.to_dict("records") if not _missing(r["speedup"]) and r["cell"]
            != reference]
    if not rows:
        return None
    best = max(rows, key=lambda r: r["speedup"])
    return str(best["cell"]), float(best["speedup"]), reference


def _value(v) -> float | None:
    return None if _missing(v) else float(v)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def verdict_of(run, sp: pd.DataFrame, summary: pd.DataFrame, experiments=()) -> Verdict:
    """The run's verdict. sp: its speedup_frame, summary: its summary_frame (a multi-seed run: both
    as seeds.cell_summary aggregates them; its regime map is not read, as the report shows the first
    seed's). experiments: the records (ExperimentSpec) whose analyses say what would change the
    answer."""
    compared = comparisons(sp, attribution(sp))
    first = str(summary["cell"].iloc[0]) if len(summary) else None
    found = {e.name: e.load_analysis().answer(run, sp) for e in experiments}
    return Verdict(compared, {name: a for name, a in found.items() if a is not None},
                   None if compared or first is None else fastest(summary, first),
                   tuple(experiments))
