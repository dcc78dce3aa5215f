"""The regime map: one row per grid point of `--ablation regime`, and where periodic asynchrony
pays.

A point is a workload (switches.workload, set by the regime ablations; cells without one, as in the
tri_model or all ablations, are not points of a map) with a sync cell, a
periodic-async cell and, where run, a barrier cell. Per point: the knobs that define it (the sync
cell's resolved config), statistics of the sync cell that could explain the speedup (STATISTICS),
the measured speedup with its spread over iterations, the prediction and the barrier attribution
(both from analysis/speedup.py speedup_frame). Which statistic separates wins from losses best is
measured over the map (explain), and the crossover (speedup 1.0) is read off the measured and the
predicted curve along it (crossover), and the verdict's answer (answer). Pure functions of result
files; rendering is text.py's, plot.py's and report.py's.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd
from rlbench.analysis.cost_spread import point_spread
from rlbench.analysis.data import CellData, RunData
from rlbench.analysis.seeds import is_multi_seed
from rlbench.core.experiments.spec import Analysis
from rlbench.core.results import schema

WIN = 1.0  # a speedup above this is a win: periodic-async's TPSPD beats sync's on the same devices


@dataclass(frozen=True)
class Statistic:
    label: str  # axis label
    unit: str  # "share" (shown in %), "ratio" (×) or "tokens"
    condition: str  # "periodic asynchrony pays here when <condition with the crossover's value>"


STATISTICS = {
    "rollout_share": Statistic("sync: rollout share of the iteration", "share",
                               "sync spends more than {} of its iteration generating"),
    "tail_ratio": Statistic("sync: longest response / mean response", "ratio",
                            "the longest response is more than {} the mean"),
    "longest_response": Statistic("sync: longest response (tokens)", "tokens",
                                  "the longest response of an iteration is longer than {}"),
}
COLUMNS = ["point", "sync", "barrier", "async", "response_length", "length_mean", "length_sigma",
           "max_new_tokens", "prompts", "group_size", "max_num_seqs", *STATISTICS,
           "measured_speedup",
           "measured_low", "measured_high", "measured_n", "measured_basis", "measured_min",
           "measured_max",
           "predicted_speedup", "error_pct", "split_measured",
           "split_predicted", "overlap_measured", "overlap_predicted", "predicted_with_contention",
           "contention_error_pct", "contention_kappa", "contention_kappa_decode", "kappa_source",
           "train_cost_spread_pct", "rollout_cost_spread_pct", "descheduled_pct"]


def regime_frame(run: RunData, sp: pd.DataFrame) -> pd.DataFrame:
    """One row per point (a workload) that has a sync cell and a periodic-async (overlap) cell, in
    run order.

    sp: tables.speedup_frame(run). measured_low/high: the measured speedup's 95% interval, from
    measured_min/max's samples: the async cell's TPSPD over sync's, iteration by iteration (both
    cells draw the same lengths for iteration k, so the pairing removes the spread the tail itself
    puts between iterations; analysis/intervals.py); split: barrier / sync; overlap: async /
    barrier."""
    if not len(sp):
        return pd.DataFrame(columns=COLUMNS)
    recs = [r for r in sp.to_dict("records") if run.cell(r["cell"]).switches.get("workload")]
    barrier = {_point(run.cell(r["cell"])): r for r in recs if not r["overlap"]}
    rows = []
    for a in (r for r in recs if r["overlap"]):
        cell, sync = run.cell(a["cell"]), run.cell(a["predicted_from"])
        b = barrier.get(_point(cell))
        b = b if b and b["predicted_from"] == a["predicted_from"] else None
        lo, hi = paired_range(cell, sync)
        rows.append({"point": _point(cell), "sync": sync.name, "barrier": b and b["cell"],
                     "async": cell.name,
                     **knobs(sync), "rollout_share": a["rollout_share_of_sync"], **tail_stats(sync),
                     "measured_speedup": a["measured_speedup"], "measured_low": a["measured_low"],
                     "measured_high": a["measured_high"], "measured_n": a["measured_n"],
                     "measured_basis": a["measured_basis"], "measured_min": lo, "measured_max": hi,
                     "predicted_speedup": a["predicted_speedup"], "error_pct": a["error_pct"],
                     "split_measured": b and b["measured_speedup"],
                     "split_predicted": b and b["predicted_speedup"],
                     "overlap_measured": b and schema.ratio(a["measured_speedup"],
                                                            b["measured_speedup"]),
                     "overlap_predicted": b and schema.ratio(a["predicted_speedup"],
                                                             b["predicted_speedup"]),
                     "predicted_with_contention": a["predicted_with_contention"],
                     "contention_error_pct": _error_pct(a["predicted_with_contention"],
                                                        a["measured_speedup"]),
                     "contention_kappa": a["contention_kappa"],
                     "contention_kappa_decode": a["contention_kappa_decode"],
                     "kappa_source": a["kappa_source"],
                     **point_spread(sync, b and run.cell(b["cell"]), cell)})
    return pd.DataFrame(rows, columns=COLUMNS)


def _error_pct(predicted, measured) -> float | None:
    return 100 * (predicted / measured
                  - 1) if _num(predicted) and _num(measured) and measured else None


def _point(c: CellData) -> str:
    return c.switches["workload"]


def knobs(sync: CellData) -> dict:
    """The point's settings, from the sync cell's resolved config."""
    ro = sync.config.rollout
    return {"response_length": ro.response_length, "length_mean": ro.response_length_mean,
            "length_sigma": ro.response_length_sigma, "max_new_tokens": ro.max_new_tokens,
            "prompts": sync.config.train.prompts_per_iteration, "group_size": ro.group_size,
            "max_num_seqs": ro.max_num_seqs}


def tail_stats(sync: CellData) -> dict:
    """Median over the measured iterations of the longest response and of longest / mean
    (tokens)."""
    measured = {it["iteration"] for it in sync.measured()}
    by_iter: dict[int, list[int]] = {}
    for s in sync.samples:
        if s["iteration"] in measured:
            by_iter.setdefault(s["iteration"], []).append(int(s["response_len"]))
    if not by_iter:
        return {"tail_ratio": None, "longest_response": None}
    return {"tail_ratio": statistics.median(max(v) / statistics.fmean(v) for v in by_iter.values()),
            "longest_response": statistics.median(max(v) for v in by_iter.values())}


def paired_range(cell: CellData, sync: CellData) -> tuple[float | None, float | None]:
    """(min, max) over the iterations both measured of cell TPSPD_k / sync TPSPD_k."""
    ref = {it["iteration"]: it.get("tpspd") for it in sync.measured()}
    ratios = [it["tpspd"] / ref[it["iteration"]] for it in cell.measured()
              if ref.get(it["iteration"]) and it.get("tpspd") is not None]
    return (min(ratios), max(ratios)) if ratios else (None, None)


@dataclass(frozen=True)
class Crossover:
    """Where a speedup curve along one statistic crosses WIN.

    kind: "crossing" (x set: losses below it, wins above, up to `misclassified` points on the wrong
    side), "everywhere" (every point is best called a win) or "nowhere" (a loss)."""
    statistic: str
    kind: str
    x: float | None
    below: str | None  # the point just below x (None unless a crossing)
    above: str | None  # the point just above x
    misclassified: int


def crossover(frame: pd.DataFrame, statistic: str,
              speedup: str = "measured_speedup") -> Crossover | None:
    """The threshold on `statistic` that best separates wins (above) from losses (below) among the
    points with both values: fewest points on the wrong side, then a cut whose two neighbours
    straddle WIN, then the lowest; x is where the line between those neighbours crosses WIN (their
    midpoint if they do not straddle it). None with fewer than 2 points."""
    pts = sorted((float(r[statistic]), float(r[speedup]),
                  r["point"]) for r in frame.to_dict("records")
                 if _num(r[statistic]) and _num(r[speedup]))
    if len(pts) < 2:
        return None
    wins = [y > WIN for _, y, _ in pts]

    def rank(i: int) -> tuple:  # cut before sorted point i: 0 = all wins, len = all losses
        errors = sum(wins[:i]) + sum(not w for w in wins[i:])
        straddles = 0 < i < len(pts) and not wins[i - 1] and wins[i]
        return errors, not straddles, i

    best = min(range(len(pts) + 1), key=rank)
    errors = rank(best)[0]
    if best == 0:
        return Crossover(statistic, "everywhere", None, None, None, errors)
    if best == len(pts):
        return Crossover(statistic, "nowhere", None, None, None, errors)
    (x0, y0, lo), (x1, y1, hi) = pts[best - 1], pts[best]
    x = x0 + (WIN - y0) * (x1 - x0) / (y1 - y0) if y0 <= WIN < y1 else (x0 + x1) / 2
    return Crossover(statistic, "crossing", x, lo, hi, errors)


def explain(frame: pd.DataFrame) -> list[dict]:
    """Every statistic, best first: how many points its best threshold misclassifies (fewest first),
    then the rank correlation (Spearman) of the statistic with the measured speedup (highest
    first)."""
    out = []
    for name in STATISTICS:
        cross = crossover(frame, name)
        if cross is not None:
            out.append({"statistic": name, "misclassified": cross.misclassified,
                        "spearman": spearman(frame[name], frame["measured_speedup"]),
                        "crossover": cross})
    key = {name: i for i, name in enumerate(STATISTICS)}
    return sorted(out, key=lambda e: (e["misclassified"], -_or(e["spearman"], -2.0),
                                      key[e["statistic"]]))


@dataclass(frozen=True)
class CrossoverRange:
    """Where the measured crossover lies given the points' 95% intervals: low, where the curve of
    their upper bounds crosses WIN, high, where the curve of their lower bounds does (each taken
    with the crossover itself, so low <= x <= high). None: open at that end (the upper bounds pay at
    every point, so the crossover may lie below the map; the lower bounds pay at none, so it may lie
    beyond it)."""
    low: float | None
    high: float | None


@dataclass(frozen=True)
class MapVerdict:
    """The map's answer: the statistic that explains it best, and the crossover along it, measured
    (with its range) and predicted; ranked: explain()'s list (the chosen statistic first)."""
    statistic: str
    measured: Crossover
    predicted: Crossover | None
    ranked: list
    measured_range: CrossoverRange | None = None


def verdict(frame: pd.DataFrame) -> MapVerdict | None:
    """None for a map with fewer than 2 points that have a statistic and a measured speedup."""
    ranked = explain(frame)
    if not ranked:
        return None
    name = ranked[0]["statistic"]
    measured = ranked[0]["crossover"]
    return MapVerdict(name, measured, crossover(frame, name, "predicted_speedup"), ranked,
                      crossover_range(frame, name, measured))


def crossover_range(frame: pd.DataFrame, statistic: str,
                    measured: Crossover) -> CrossoverRange | None:
    """The measured crossover's range along `statistic` from the points' intervals (CrossoverRange);
    None where no point has an interval. A point without one (too few iterations) counts as
    unbounded: its upper bound pays and its lower bound does not."""
    if (
        measured.kind != "crossing"
        or "measured_low" not in frame
        or frame["measured_low"].isna().all()
    ):
        return None
    bounds = frame.assign(measured_low=frame["measured_low"].fillna(0.0),
                          measured_high=frame["measured_high"].fillna(math.inf))
    early, late = crossover(bounds, statistic, "measured_high"), crossover(bounds, statistic,
                                                                           "measured_low")
    low = None if early is None or early.kind == "everywhere" else \
        min(measured.x, early.x if early.kind == "crossing" else measured.x)
    high = None if late is None or late.kind == "nowhere" else \
        max(measured.x, late.x if late.kind == "crossing" else measured.x)
    return CrossoverRange(low, high)


def spearman(a: pd.Series, b: pd.Series) -> float | None:
    """Rank correlation of two columns over the rows where both are set (None if undefined)."""
    both = pd.DataFrame({"a": pd.to_numeric(a, errors="coerce"),
                         "b": pd.to_numeric(b, errors="coerce")}).dropna()
    if len(both) < 2 or both["a"].nunique() < 2 or both["b"].nunique() < 2:
        return None
    # ties share their mean rank, as scipy.stats.spearmanr's: Pearson's r of the ranks
    ranks = both.rank()
    return float(ranks["a"].corr(ranks["b"]))


def prediction_check(frame: pd.DataFrame, tolerance_pct: float = 10.0,
                     column: str = "error_pct") -> dict:
    """How many points the prediction meets within ±tolerance_pct, and the worst miss (column: the
    error of the model, or contention_error_pct for the proposed contention term)."""
    errs = [(r["point"], float(r[column])) for r in frame.to_dict("records") if _num(r[column])]
    worst = max(errs, key=lambda e: abs(e[1]), default=(None, None))
    return {"points": len(errs), "within": sum(abs(e) <= tolerance_pct for _, e in errs),
            "tolerance_pct": tolerance_pct, "worst_point": worst[0], "worst_error_pct": worst[1]}


def _num(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _or(v, default):
    return default if v is None or (isinstance(v, float) and math.isnan(v)) else v


def tail_key(r: dict) -> tuple:
    """Points that draw the same lengths share a key: (response_length, max_new_tokens, sigma,
    mean); EOS-ended responses have no drawn sigma or mean."""
    if r["response_length"] == "eos":
        return ("eos", r["max_new_tokens"], None, None)
    return (r["response_length"], r["max_new_tokens"], r["length_sigma"], r["length_mean"])


def length_frame(run: RunData, frame: pd.DataFrame) -> pd.DataFrame:
    """The response lengths each tail produced (sync cells' measured iterations, pooled over the
    points that share the tail): count, mean, percentiles, max, share cut at max_new_tokens;
    `lengths` holds the sorted values for plotting. Drawn tails and EOS-ended ones side by side."""
    groups: dict[tuple, dict] = {}
    for r in frame.to_dict("records"):
        g = groups.setdefault(tail_key(r),
                              {"points": [], "lengths": [], "max_new_tokens": r["max_new_tokens"],
                                            "response_length": r["response_length"]})
        g["points"].append(r["point"])
        sync = run.cell(r["sync"])
        measured = {it["iteration"] for it in sync.measured()}
        g["lengths"] += [int(s["response_len"]) for s in sync.samples if s["iteration"] in measured]
    rows = []
    for key, g in groups.items():
        v = np.sort(np.asarray(g["lengths"], dtype=float))
        if not len(v):
            continue
        rows.append({"tail": key, "points": ", ".join(g["points"]),
                     "response_length": g["response_length"],
                     "samples": len(v), "mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
                     "p90": float(np.percentile(v, 90)), "p99": float(np.percentile(v, 99)),
                     "max": float(v[-1]),
                     "max_over_mean": float(v[-1] / v.mean()),
                     "cut_share": float((v >= (g["max_new_tokens"] or math.inf)).mean()),
                     "lengths": v.tolist()})
    return pd.DataFrame(rows)


def answer(run: RunData, sp: pd.DataFrame) -> MapVerdict | None:
    """The verdict's answer from the map (None: no map of 2 points; a multi-seed run's map is not
    read, as its report shows the first seed's)."""
    return None if is_multi_seed(run) else verdict(regime_frame(run, sp))


ANALYSIS = Analysis(answer=answer)
