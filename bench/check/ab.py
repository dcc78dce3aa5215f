"""What `rlbench check --against REF` judges: the new tree against the old, paired iteration by
iteration.

Both trees ran the same workload as the two sides of one turn ring (bench/run/interleave.py):
iteration k of a cell ran in the old tree and in the new one back to back, with the same seed, so
both did the same work on the same machine at nearly the same moment. Every performance metric is a
per-iteration log-ratio new/old, judged against this run's own iteration-to-iteration spread: TPSPD
of every cell (tpspd:<cell>, wall time: everything the iteration does); CPU seconds of each stage
per unit of its work (cost:<stage>, UNITS), paired per cell and iteration and pooled over the cells
that run it, so code every cell runs (the sampler's decode step, the optimizer, the log-prob
forwards, the reward) shows although between-cell ratios cancel it; and the between-cell ratios of
bench/check/metrics.py (speedup, the switch gains, stage_cost, queue_cost). Within the new tree
alone, strictly: the invariants (same_accuracy, same_start: sync and periodic-async are the same
updates). New against old, by tolerance: accuracy, reward, overhead_share. Outside the measured
iterations, one value per cell or process and tree, each against a floor from its measured noise
(bench/check/lifecycle.py): start-up, evaluation seconds, peak memory and CPU of every process.
Every family is a CHECK row of core/results/metric_table.py. A metric the old tree has and the new
one lacks is a failure; a cell of the new tree that did not complete is one too.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from rlbench.check import lifecycle
from rlbench.check import stats as check_stats
from rlbench.check.baseline import DEFAULT_TOLERANCES, METRIC_TOLERANCES
from rlbench.check.metrics import compute_metrics, measured, read_cells, stage_events
from rlbench.check.verdicts import CheckResult, Row, judge, verdict_of
from rlbench.core.results.metric_table import CHECK_FAMILIES, check_metric, family

# stage -> (the iteration record's field that counts its work, None: once per iteration; unit; what
# runs)
UNITS = {
    "rollout": ("response_tokens", "generated token",
                "rollout engine: the sampler's prefill and decode steps"),
    "old_logprob": ("tokens", "trained token", "old-policy log-prob forward"),
    "ref_logprob": ("tokens", "trained token", "reference-policy log-prob forward"),
    "update": ("tokens", "trained token",
               "gradient pass (forward + backward; tri-model and packed layouts)"),
    "optimizer_step": (None, "iteration", "optimizer step"),
    "weight_sync": (None, "iteration", "weight sync to the rollout engine"),
    "reward": ("num_samples", "sample", "reward function"),
    "advantage": ("num_samples", "sample", "group advantages"),
    "handoff": ("num_samples", "sample",
                "queue path: the consumer opening each group taken off the queue"),
}
# A/B verdict: a paired metric is worse/better when its change lies beyond z standard errors of this
# run's own per-iteration spread and beyond the floor. The floor covers what no within-run statistic
# sees: each process of the old and of the new tree has its own offset (memory layout, core),
# measured between unchanged A/B runs at 1-1.9x the within-run standard error. It is per pair of
# processes (old and new of one cell); a ratio between two cells carries two pairs' offsets, so
# sqrt(2) times it. Chosen on unchanged A/B runs: bench/baselines/README.md.
AB_STATS = {"z": 3.0, "floor": 0.06}
# The confirming run (bench/check/confirm.py) judges only what the first run flagged, on fresh
# processes: the same floor (offsets are as large), a lower t (the first run has screened already;
# the joint rate of within-run noise is the product). Chosen on the 20 unchanged runs:
# bench/baselines/README.md.
CONFIRM_STATS = {"z": 2.0, "floor": 0.06}
# The families that are a ratio between two cells (`<a>/<b>` in their names)
BETWEEN_CELLS = tuple(f for f, row in CHECK_FAMILIES.items() if "/" in row.name)


def floor_of(metric: str, stats: dict = AB_STATS) -> float:
    """A paired metric's floor as a relative change: the base floor, x sqrt(2) in log units between
    two cells (the metrics outside the iterations have their own: bench/check/lifecycle.py
    floor)."""
    pairs = 2 if family(metric) in BETWEEN_CELLS else 1
    return float(np.expm1(np.log1p(stats["floor"]) * np.sqrt(pairs)))


def cell_tables(run_dir: Path) -> dict[str, dict[int, dict]]:
    """{cell: {measured iteration: {"tpspd", "units": {field: n}, "cpu": {stage: CPU s, all
    workers}}}}."""
    _, cells = read_cells(run_dir)
    out = {}
    for name, res in cells.items():
        if res.get("status") == "missing":
            continue
        table = {it["iteration"]: {"tpspd": float(it["tpspd"]), "cpu": defaultdict(float),
                                   "units": {f: it.get(f) for f in ("response_tokens", "tokens",
                                                                    "num_samples")}}
                 for it in measured(res)}
        for e in stage_events(res):
            if e["iteration"] in table and e.get("cpu") is not None and e["stage"] in UNITS:
                table[e["iteration"]]["cpu"][e["stage"]] += e["cpu"]
        out[name] = table
    return out


def _per_unit(row: dict, stage: str) -> float:
    field = UNITS[stage][0]
    n = row["units"].get(field) if field else 1
    # 0: no pair (an old result without the count)
    return row["cpu"].get(stage, 0.0) / n if n else 0.0


def _log_pairs(old: dict, new: dict) -> tuple[list, list[float]]:
    """(keys, log(new / old)) for every key (iteration, or (cell, iteration)) both have."""
    ks = sorted(k for k in set(old) & set(new) if old[k] > 0 and new[k] > 0)
    return ks, [float(np.log(new[k] / old[k])) for k in ks]


def paired_metrics(old_dir: Path, new_dir: Path,
                   computed: tuple[dict, dict] | None = None) -> dict[str, dict]:
    """{metric: {"kind", "direction", "description", "old", "new", "log_ratios", "keys", "cells"}}
    for every paired metric either tree measures ("log_ratios" None where one of them lacks it;
    "keys": which iteration, or (cell, iteration), each log-ratio is; "cells": a between-cell
    ratio's numerator and denominator cell), the metrics outside the iterations
    (bench/check/lifecycle.py) included. computed: both trees' compute_metrics, where the caller has
    them already."""
    t_old, t_new = cell_tables(old_dir), cell_tables(new_dir)
    out: dict[str, dict] = {}

    def add(name: str, declared: dict, old: dict | None, new: dict | None):
        keys, pairs = _log_pairs(old, new) if old and new else (None, None)
        out[name] = {"kind": declared["kind"], "direction": declared["direction"],
                     "description": declared["description"],
                     "old": float(np.median(list(old.values()))) if old else None,
                     "new": float(np.median(list(new.values()))) if new else None,
                     "log_ratios": pairs,
                     "keys": keys, "cells": declared.get("cells")}

    for cell in dict.fromkeys([*t_old, *t_new]):
        o, n = t_old.get(cell), t_new.get(cell)
        add(*check_metric("tpspd", cell=cell),
            o and {k: r["tpspd"] for k, r in o.items()},
            n and {k: r["tpspd"] for k, r in n.items()})
    for stage, (_, unit, what) in UNITS.items():
        # Pooled over the cells: the stage's code is shared, and one measurement varies ~10-25% on a
        # 2-core machine, so four cells' iterations (four times the samples) are what makes 10%
        # visible.
        per = {side: {(c, k): _per_unit(r, stage) for c, t in tables.items() for k, r in t.items()
                      if r["cpu"].get(stage)} for side, tables in (("old", t_old), ("new", t_new))}
        if per["old"] or per["new"]:
            add(*check_metric("cost", stage=stage, stage_what=what, unit=unit), per["old"] or None,
                per["new"] or None)
    c_old, c_new = computed or (compute_metrics(old_dir), compute_metrics(new_dir))
    m_old, m_new = c_old["metrics"], c_new["metrics"]
    for name in dict.fromkeys([*m_old, *m_new]):
        m = m_old.get(name) or m_new[name]
        if "log_ratios" not in (m.get("samples") or {}):
            continue
        per_it = {side: dict(zip(mm[name]["iterations"], np.exp(mm[name]["samples"]["log_ratios"])))
                  if name in mm else None for side, mm in (("old", m_old), ("new", m_new))}
        add(name, {**m, "description": m["description"] + ", new / old"}, per_it["old"],
            per_it["new"])
    out.update(lifecycle.paired(old_dir, new_dir))
    return out


def judge_paired(x: list[float], direction: str, stats: dict = AB_STATS, floor: float | None = None
                 ) -> tuple[str, tuple, str, float]:
    """(mark, 95% interval of the relative change, note, change) of per-iteration log-ratios
    new/old; floor: the metric's (floor_of), else the base floor."""
    floor = stats["floor"] if floor is None else floor
    d, se = check_stats.trimmed(x)
    # Trimmed mean: its t has (n - 2g - 1) degrees of freedom (Tukey-McLaughlin).
    df = len(x) - 2 * int(check_stats.TRIM * len(x)) - 1
    t95, tz = check_stats.t_quantile(1.96, df), check_stats.t_quantile(stats["z"], df)
    ci = (float(np.expm1(d - t95 * se)), float(np.expm1(d + t95 * se)))
    bar = max(tz * se, np.log1p(floor))
    note = (f"flagged beyond {np.expm1(bar):+.1%} (t={tz:.2g} x se {se:.3f} over {len(x)} "
            f"iterations, floor {floor:.1%})")
    if not np.isfinite(se) or abs(d) <= bar:
        return "not significant", ci, note.replace("flagged", "within; flagged"), float(np.expm1(d))
    bad = d < 0 if direction == "higher_is_better" else d > 0
    return ("worse" if bad else "better"), ci, note, float(np.expm1(d))


def _se(name: str, x: list[float]) -> float | None:
    """The standard error of a paired metric's trimmed mean log-ratio; None for one value per
    tree."""
    if family(name) in lifecycle.FLOORS:
        return None
    se = check_stats.trimmed(x)[1]
    return float(se) if np.isfinite(se) else None


def judge_metric(name: str, m: dict, x: list[float] | None = None, stats: dict = AB_STATS
                 ) -> tuple[str, tuple | None, str, float]:
    """(mark, interval, note, change) of a paired metric (an entry of paired_metrics) from its
    log-ratios (x: shifted ones, for the power study): against this run's noise and the metric's
    floor, or, for one value per tree (bench/check/lifecycle.py), against its floor alone."""
    x = m["log_ratios"] if x is None else x
    if family(name) in lifecycle.FLOORS:
        return lifecycle.judge_scalar(x[0], m["direction"], lifecycle.floor(name, m))
    return judge_paired(x, m["direction"], stats, floor_of(name, stats))


def tolerance_metrics(c_old: dict, c_new: dict) -> tuple[dict, dict]:
    """The rest of check_metrics (accuracy, reward, overhead share, invariants) of both trees'
    compute_metrics, with the tolerances a baseline would carry."""
    def with_tol(metrics: dict) -> dict:
        out = {}
        for name, m in metrics.items():
            if "log_ratios" in (m.get("samples") or {}):
                continue
            rel, floor = METRIC_TOLERANCES.get(family(name)) or DEFAULT_TOLERANCES[m["kind"]]
            out[name] = {**m, "tolerance": rel, "abs_tolerance": floor}
        return out

    return with_tol(c_old["metrics"]), with_tol(c_new["metrics"])


def compare(old_dir: Path, new_dir: Path, label: str, stats: dict = AB_STATS):
    """-> CheckResult (bench/check/verdicts.py) of the new tree's run against the old tree's:
    exit_code 1 on a regression, a metric lost, or a cell of the new tree that did not complete."""
    res = CheckResult(str(new_dir), label, baseline_info={"kind": "A/B"})
    computed = compute_metrics(old_dir), compute_metrics(new_dir)
    res.rows = [Row(f"status:{n}", "status", "complete", c["status"], "worse",
                    note=c.get("error") or "")
                for n, c in computed[1]["cells"].items() if c["status"] != "complete"]
    for name, m in paired_metrics(old_dir, new_dir, computed).items():
        row = Row(name, m["kind"], m["old"], m["new"], "not comparable",
                  description=m["description"])
        if m["log_ratios"]:
            row.mark, row.ci, row.note, row.change = judge_metric(name, m, stats=stats)
            row.delta, row.paired, row.se = m["new"] - m["old"], True, _se(name, m["log_ratios"])
        elif m.get("why"):
            row.note = m["why"]
        elif m["old"] is not None and m["new"] is None:
            row.mark, row.note = "worse", "measured by the old tree, missing in the new one"
        elif m["old"] is None:  # judged once the accepted commit measures it too
            row.note = "new metric: the old tree does not measure it"
        else:
            row.note = "no pair of positive values to compare"
        res.rows.append(row)
    old_t, new_t = tolerance_metrics(*computed)
    for name in dict.fromkeys([*old_t, *new_t]):
        b, c = old_t.get(name), new_t.get(name)
        row = Row(name, (b or c)["kind"], b and b["value"], c and c["value"], "not comparable",
                  description=(b or c).get("description", ""))
        if c is None:
            row.mark, row.note = "worse", "measured by the old tree, missing in the new one"
        # an invariant holds within the new tree alone
        elif c["kind"] == "invariant" or b is not None:
            row.delta = c["value"] - (b["value"] if b else 0.0)
            row.change = c["value"] / b["value"] - 1 if b and b["value"] else None
            row.mark, row.ci, row.note = judge(b or c, c, {})
        else:
            row.note = "new metric: the old tree does not measure it"
        res.rows.append(row)
    verdict_of(res)
    return res
