"""The families ladder of `--ablation families` (cells.py), computed from a run's result files into
families.csv, which the terminal and the report render (report.py), and the verdict's answer from
it: which rung first pays by its interval, which pays most (answer).

One row per rung: TPSPD (median, min–max over measured iterations), the factor over the rung before
and the speedup over sync with its 95% interval (analysis/intervals.py), idle per worker over the
measured span, the staleness histogram (trained samples of the measured iterations by trained −
behaviour version; a sample's behaviour version is its oldest token's) and the token staleness
(partial rollout: tokens of one response can come from several versions), accuracy first → final,
and the prediction: every rung from the sync cell's measured costs alone
(rlbench.simulate.calibrate.predict_cells: sync in-sample, barrier and periodic-async by the
report's model, one-step-off and k2 by the bounded-staleness simulator, k2_partial by its
partial-rollout model). Predicted factors are ratios of predicted TPSPDs, except the first (split),
which is over sync's measured TPSPD as the report's predicted speedups are, so the predicted factors
multiply to the last rung's predicted speedup. `ladder_factor` names the factor of the ladder line a
rung's factor belongs to (cells.py GROUPS: the two staleness rungs form one).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rlbench.analysis import intervals
from rlbench.analysis.data import CellData, RunData, load, workers_in
from rlbench.analysis.intervals import Ratio
from rlbench.analysis.seeds import is_multi_seed, per_seed
from rlbench.analysis.speedup import predict_cells
from rlbench.core.errors import UserError
from rlbench.core.experiments.spec import Analysis
from rlbench.core.results import schema
from rlbench.core.results.metrics import idle_fractions
from rlbench.experiments.families import cells as families

CSV = "families.csv"

# rung factor -> line factor
GROUP_OF = {part: name for name, parts in families.GROUPS for part in parts}
STALENESS_SHOWN = 3  # stale_0 .. stale_2 columns always (k = 2); more where a run has more
HEAD = ["rung", "cell", "schedule", "adds", "factor_name", "ladder_factor", "tpspd_median",
        "tpspd_min",
        "tpspd_max", "tpspd_span", "factor", "speedup", "speedup_low", "speedup_high", "speedup_n",
        "speedup_basis", "predicted_tpspd", "predicted_factor", "predicted_speedup", "error_pct",
        "wall_s_median",
        "token_staleness_mean", "accuracy_first", "accuracy_final", "status"]


def write_ladder(run_dir) -> Path | None:
    """families.csv in run_dir when the run is a families ladder (a multi-seed run: its first seed's
    cells); -> its path, or None (any earlier families.csv is removed: it would describe other
    cells)."""
    path = Path(run_dir) / CSV
    frame = ladder_frame(load(run_dir))
    if frame is None:
        path.unlink(missing_ok=True)
        return None
    frame.to_csv(path, index=False)
    return path


def ladder_frame(run: RunData):
    """families_frame of the run when it is a families ladder (a multi-seed run: its first seed's
    cells), else None."""
    shown = next(iter(per_seed(run).values())) if is_multi_seed(run) else run
    return families_frame(shown) if is_families(shown) else None


def is_families(run: RunData) -> bool:
    """Every rung's cell is in the run (measured, or listed in ablation.json and not run)."""
    names = {c.name for c in run.cells} | set(run.missing)
    return all(r.cell in names for r in families.RUNGS)


def families_frame(run: RunData):
    """One row per rung in ladder order (a pandas DataFrame: HEAD, then stale_<s> and
    idle_<worker>_pct)."""
    cells = [run.cell(r.cell) for r in families.RUNGS]
    predicted = _predictions(run)
    stale = [_staleness(c) for c in cells]
    depth = max([STALENESS_SHOWN - 1] + [s for h in stale for s in h])
    workers = workers_in([c for c in cells if c is not None])
    rows = []
    for i, (rung, c) in enumerate(zip(families.RUNGS, cells)):
        row = _row(i, rung, c, predicted.get(rung.cell), rows[-1] if rows else None,
                   rows[0] if rows else None)
        # over sync, by iteration
        row.update(intervals.columns(intervals.paired(c, cells[0]), "speedup", "speedup"))
        row.update({f"stale_{s}": stale[i].get(s, 0) if c is not None else None for s
                                  in range(depth + 1)})
        idle = _idle(c)
        row.update({f"idle_{w}_pct": 100 * idle[w] if w in idle else None for w in workers})
        rows.append(row)
    columns = HEAD + [f"stale_{s}" for s in range(depth + 1)] + [f"idle_{w}_pct" for w in workers]
    return pd.DataFrame(rows, columns=columns)


def _row(i: int, rung, c: CellData | None, pred: float | None, prev: dict | None,
         first: dict | None) -> dict:
    """Rung i's measured and predicted columns; prev: the rung above's row; first: sync's (the
    reference)."""
    med = c.tpspd() if c is not None else None
    ref = first["tpspd_median"] if first else med
    return {"rung": i, "cell": rung.cell, "schedule": rung.switches["schedule"], "adds": rung.adds,
            "factor_name": rung.factor, "ladder_factor": GROUP_OF.get(rung.factor),
            "tpspd_median": med,
            "tpspd_min": c and c.tpspd("min"), "tpspd_max": c and c.tpspd("max"),
            "tpspd_span": _span_rate(c),
            "factor": schema.ratio(med, prev["tpspd_median"]) if prev else None,
            "speedup": schema.ratio(med, ref), "predicted_tpspd": pred,
            # the split is over sync's measured TPSPD, as the report's predicted speedups are
            "predicted_factor": schema.ratio(pred,
                                             ref if i == 1 else prev["predicted_tpspd"]) if prev
                                else None,
            "predicted_speedup": schema.ratio(pred, ref),
            "error_pct": 100 * (pred / med - 1) if pred and med else None,
            "wall_s_median": c and (c.aggregates.get("wall_s") or {}).get("median"),
            "token_staleness_mean": _token_staleness(c), **_accuracy(c),
            "status": c.status if c is not None else "not run"}


def _predictions(run: RunData) -> dict[str, float]:
    """cell -> predicted TPSPD from its sync twin's measured costs (nothing from the async
    cells)."""
    try:
        return {r["cell"]: r["predicted_tpspd"] for r in predict_cells(run)}
    except UserError:  # no sync cell with measured iterations: no prediction
        return {}


def _span_rate(c: CellData | None) -> float | None:
    """Tokens of the measured iterations / (their summed wall time x devices): a rate over the
    measured span, the statistic the bounded-staleness simulator predicts (under bounded staleness
    an iteration's window starts where the previous one ended, so per-iteration TPSPDs, whose median
    the ladder uses, scatter widely)."""
    measured = c.measured() if c is not None else []
    wall = sum(it["wall_s"] * it["devices"] for it in measured)
    return sum(it["tokens"] for it in measured) / wall if wall else None


def _idle(c: CellData | None) -> dict[str, float]:
    """Worker -> share of the measured iterations' windows in which it ran no work stage, over every
    event in them whichever iteration it belongs to: a stale rollout runs ahead of the iteration it
    feeds, so the per-iteration idle of the summary (events of that iteration only) would call it
    idle. What lies between two windows (evaluation, a held gap) is in neither."""
    measured = c.measured() if c is not None else []
    total = sum(it["end"] - it["start"] for it in measured)
    if not total:
        return {}
    idle: dict[str, float] = {}
    for it in measured:
        for w, frac in idle_fractions(c.events, it["start"], it["end"]).items():
            idle[w] = idle.get(w, 0.0) + frac * (it["end"] - it["start"]) / total
    return idle


def _measured_samples(c: CellData) -> list[dict]:
    its = {it["iteration"] for it in c.measured()}
    return [s for s in c.samples if s["iteration"] in its]


def _staleness(c: CellData | None) -> dict[int, int]:
    """Trained samples of the measured iterations by staleness (trained - behaviour version)."""
    if c is None:
        return {}
    return dict(Counter(int(s["trained_version"]) - int(s["behaviour_version"]) for s
                        in _measured_samples(c)))


def _token_staleness(c: CellData | None) -> float | None:
    """Mean over the measured iterations' response tokens of trained − the version that sampled the
    token."""
    if c is None:
        return None
    total = count = 0
    for s in _measured_samples(c):
        by_version = (s.get("tokens_by_version")
                      or {str(s["behaviour_version"]): int(s["response_len"])})
        for v, n in by_version.items():
            total += (int(s["trained_version"]) - int(v)) * n
            count += n
    return total / count if count else None


def _accuracy(c: CellData | None) -> dict:
    evals = (c.result.get("evals") or []) if c is not None else []
    return {"accuracy_first": evals[0].get("accuracy") if evals else None,
            "accuracy_final": evals[-1].get("accuracy") if evals else None}




@dataclass(frozen=True)
class RungSpeedup:
    """A rung of the families ladder, its speedup over sync measured (with its interval) and
    predicted."""
    cell: str
    adds: str
    speedup: float | None
    predicted: float | None
    interval: Ratio = field(default_factory=lambda: Ratio(None))

    @property
    def outcome(self) -> str | None:
        return intervals.outcome(self.speedup, self.interval.low, self.interval.high,
                                 self.interval.basis)


@dataclass(frozen=True)
class LadderAnswer:
    """first_paying: the first rung whose speedup over sync wins by its interval (None: no rung
    does); best: the rung with the highest measured speedup."""
    first_paying: RungSpeedup | None
    best: RungSpeedup | None


def ladder_answer(frame) -> LadderAnswer | None:
    """The families ladder (ladder_frame) read for its answer: which rung first pays, which pays
    most."""
    if frame is None or not len(frame):
        return None
    rungs = [RungSpeedup(r["cell"], r["adds"], _value(r["speedup"]), _value(r["predicted_speedup"]),
                         intervals.from_columns(r, "speedup", "speedup"))
             for r in frame.to_dict("records")[1:]]  # the first rung is sync itself
    measured = [r for r in rungs if r.speedup is not None]
    paying = [r for r in measured if r.outcome == intervals.WINS]
    return LadderAnswer(paying[0] if paying else None,
                        max(measured, key=lambda r: r.speedup, default=None))


def _value(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def answer(run: RunData, sp) -> LadderAnswer | None:
    """The verdict's answer from the ladder; None where the run is not a families ladder."""
    return ladder_answer(ladder_frame(run))


ANALYSIS = Analysis(write=write_ladder, answer=answer)
