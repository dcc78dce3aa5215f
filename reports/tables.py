"""The comparison table: one row per cell (pandas), written as summary.csv and summary.md.

Units: TPSPD in tokens / s / device; token rates in tokens / s; stage columns are the mean seconds
per measured iteration (summed over workers); idle columns are percent of the iteration wall time.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rlbench.reports.data import CellData, RunData, get_path, stages_in, workers_in
from rlbench.reports.predict import predict_async

BASE_COLUMNS = ["cell", "schedule", "tri_model", "shared_prompt", "devices", "tpspd_median",
                "tpspd_min", "tpspd_max", "speedup", "wall_s_median", "rollout_tok_s", "train_tok_s"]
DIAGNOSTICS = ["format_rate_before", "format_rate_after", "accuracy_any_format_before",
               "accuracy_any_format_after"]  # first/last evaluation's diagnostics (built-in evaluation only)
TAIL_COLUMNS = ["rollout_occupancy", "accuracy_before", "accuracy_after", *DIAGNOSTICS, "staleness_max",
                "measured_iterations", "status"]
EXPONENTS = (1.0, 0.0)  # rollout scaling exponents shown in the report: ideal, none


def summary_frame(run: RunData) -> pd.DataFrame:
    """One row per cell, reference cell first; NaN where a cell measured nothing."""
    stages, workers = stages_in(run.cells), workers_in(run.cells)
    ref = run.ref.tpspd() if run.ref else None
    rows = [_row(c, ref, stages, workers) for c in run.cells]
    columns = BASE_COLUMNS + [f"stage_{s}_s" for s in stages] + [f"idle_{w}_pct" for w in workers] \
        + TAIL_COLUMNS
    return pd.DataFrame(rows, columns=columns)


def _row(c: CellData, ref_tpspd: float | None, stages: list[str], workers: list[str]) -> dict:
    agg, sw = c.aggregates, c.switches
    med = c.tpspd()
    row = {"cell": c.name, "schedule": c.schedule, "tri_model": sw.get("tri_model"),
           "shared_prompt": sw.get("shared_prompt"), "devices": c.devices,
           "tpspd_median": med, "tpspd_min": c.tpspd("min"), "tpspd_max": c.tpspd("max"),
           "speedup": med / ref_tpspd if med is not None and ref_tpspd else None,
           "wall_s_median": get_path(agg, "wall_s.median"),
           "rollout_tok_s": get_path(agg, "rollout_tokens_per_s.median"),
           "train_tok_s": get_path(agg, "train_tokens_per_s.median"),
           "rollout_occupancy": agg.get("rollout_occupancy"),
           "accuracy_before": agg.get("accuracy_before", _eval(c, 0, "accuracy")),
           "accuracy_after": agg.get("accuracy_after", _eval(c, -1, "accuracy")),
           **{key: _eval(c, 0 if key.endswith("_before") else -1, key.rsplit("_", 1)[0])
              for key in DIAGNOSTICS},
           "staleness_max": agg.get("staleness_max"),
           "measured_iterations": agg.get("measured_iterations", 0), "status": c.status}
    stage_s, idle = agg.get("stage_s") or {}, agg.get("idle_frac") or {}
    for s in stages:
        row[f"stage_{s}_s"] = stage_s.get(s, 0.0) if agg else None
    for w in workers:
        row[f"idle_{w}_pct"] = 100.0 * idle[w] if w in idle else None
    return row


def _eval(c: CellData, index: int, key: str) -> float | None:
    """key of the first (0) or last (-1) evaluation; None where there is none."""
    evals = c.result.get("evals") or []
    return evals[index].get(key) if evals else None


def speedup_frame(run: RunData) -> pd.DataFrame:
    """Measured vs predicted speedup of every periodic-async cell over its sync reference.

    The reference is the sync cell with the same tri_model/shared_prompt switches, else the first
    sync cell. Predictions use predict_async with the async cell's device split, for each exponent
    in EXPONENTS; ablation.json "predicted" values, where given, come in their own column.
    """
    rows = []
    for c in run.cells:
        sync = _sync_reference(run, c)
        if c.schedule != "periodic_async" or sync is None:
            continue
        r, t = _split(c)
        row = {"cell": c.name, "reference": sync.name, "rollout_devices": r, "train_devices": t,
               "measured_speedup": _ratio(c.tpspd(), sync.tpspd())}
        for a in EXPONENTS:
            row[f"predicted_a{a:g}"] = _predict(sync, r, t, a)
        row["predicted_given"] = _given(run.predicted, c.name)
        rows.append(row)
    cols = ["cell", "reference", "rollout_devices", "train_devices", "measured_speedup"] \
        + [f"predicted_a{a:g}" for a in EXPONENTS] + ["predicted_given"]
    return pd.DataFrame(rows, columns=cols)


def _sync_reference(run: RunData, cell: CellData) -> CellData | None:
    syncs = [s for s in run.cells if s.schedule == "sync" and s.iterations]
    same = [s for s in syncs if all(s.switches.get(k) == cell.switches.get(k)
                                    for k in ("tri_model", "shared_prompt"))]
    return (same or syncs or [None])[0]


def _split(c: CellData) -> tuple[int, int]:
    eng = get_path(c.result, "config.engine") or {}
    return int(eng.get("rollout_devices") or 1), int(eng.get("train_devices") or 1)


def _predict(sync: CellData, r: int, t: int, a: float) -> float | None:
    return predict_async(sync.result, sync.samples, r, t, rollout_exponent=a)["predicted_speedup"]


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def _given(predicted, cell: str) -> float | None:
    """ablation.json "predicted": {cell: number} or {cell: {"predicted_speedup": x}} or a number."""
    if isinstance(predicted, (int, float)):
        return float(predicted)
    if isinstance(predicted, dict):
        v = predicted.get(cell, predicted.get("predicted_speedup"))
        if isinstance(v, dict):
            v = v.get("predicted_speedup")
        return float(v) if isinstance(v, (int, float)) else None
    return None


COMPACT_HEAD = ["cell", "TPSPD median (min–max)", "speedup", "rollout tok/s", "train tok/s",
                "idle % per worker", "acc before→after", "####-format %", "max stale", "status"]


def compact_rows(df: pd.DataFrame) -> list[list[str]]:
    """The headline columns (COMPACT_HEAD) of summary_frame rows, as text, for terminal and HTML."""
    idle_cols = [c for c in df.columns if c.startswith("idle_") and c.endswith("_pct")]
    return [_compact(r, idle_cols) for r in df.to_dict("records")]


def _compact(r: dict, idle_cols: list[str]) -> list[str]:
    tp = "–" if _missing(r["tpspd_median"]) else \
        f"{fmt(r['tpspd_median'])} ({fmt(r['tpspd_min'])}–{fmt(r['tpspd_max'])})"
    idle = ", ".join(f"{c[5:-4]} {r[c]:.0f}" for c in idle_cols if not _missing(r[c])) or "–"
    sp = "–" if _missing(r["speedup"]) else f"{r['speedup']:.2f}×"
    acc = f"{fmt(r['accuracy_before'])}→{fmt(r['accuracy_after'])}"
    form = "–" if _missing(r["format_rate_before"]) or _missing(r["format_rate_after"]) else \
        f"{100 * r['format_rate_before']:.0f}→{100 * r['format_rate_after']:.0f}"
    return [str(r["cell"]), tp, sp, fmt(r["rollout_tok_s"]), fmt(r["train_tok_s"]), idle, acc, form,
            fmt(r["staleness_max"]), str(r["status"])]


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt(v) -> str:
    """One table cell as text: '–' for missing, 4 significant digits, whole numbers from 1000."""
    if _missing(v):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table (no tabulate dependency)."""
    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v).replace("|", "\\|") for v in _values(row)) + " |"
            for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def _values(row) -> list:
    return [None if _missing(v) else v for v in row]


def write_summary(run: RunData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write summary.csv and summary.md into the run folder; returns (summary, speedups)."""
    df, sp = summary_frame(run), speedup_frame(run)
    df.to_csv(run.path / "summary.csv", index=False)
    md = [f"# rlbench summary: {run.name}\n", to_markdown(df)]
    if len(sp):
        md += ["\n## Measured vs predicted periodic-async speedup (TPSPD ratio)\n", to_markdown(sp)]
    (run.path / "summary.md").write_text("\n".join(md))
    return df, sp
