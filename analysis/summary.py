"""The comparison table: one row per cell (pandas), written here as summary.csv (with
utilisation.csv) and rendered as summary.md by the reports.

Units: TPSPD in tokens / s / device; token rates in tokens / s; stage columns are the mean seconds
per measured iteration (summed over workers); idle columns are percent of the iteration wall time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from rlbench.analysis.busy import busy_columns, busy_stages_in
from rlbench.analysis.data import CellData, RunData, get_path, stages_in, workers_in
from rlbench.analysis.heldout import COLUMNS as HELDOUT_COLUMNS
from rlbench.analysis.heldout import has_fact_split, heldout_columns
from rlbench.analysis.speedup import colocated, reference_of, speedup_frame
from rlbench.analysis.utilisation import utilisation_frame
from rlbench.core.costmodel.predict import rollout_share
from rlbench.core.results import metric_table
from rlbench.core.results.metric_table import SUMMARY

# The summary's columns: what the cell is, then the reported metrics as core/results/metric_table.py
# lists them.
BASE_COLUMNS = ["cell", "schedule", "tri_model", "shared_prompt", "devices",
                *metric_table.names(SUMMARY, "head")]


# first/last evaluation's diagnostics (built-in evaluation only)
DIAGNOSTICS = ["format_rate_before", "format_rate_after", "accuracy_any_format_before",
               "accuracy_any_format_after", "worked_rate_before", "worked_rate_after"]


TAIL_COLUMNS = ["rollout_backend", *metric_table.names(SUMMARY, "tail"), "measured_iterations",
                "status"]


def write_summary_csv(run: RunData, df: pd.DataFrame) -> None:
    """summary.csv (df: summary_frame(run)) and, where any cell recorded utilisation,
    utilisation.csv (analysis/utilisation.py) in the run folder."""
    df.to_csv(run.path / "summary.csv", index=False)
    util = utilisation_frame(run)
    if len(util):
        util.to_csv(run.path / "utilisation.csv", index=False)


def summary_frame(run: RunData) -> pd.DataFrame:
    """One row per cell, reference cell first; NaN where a cell measured nothing."""
    stages, workers, busy = stages_in(run.cells), workers_in(run.cells), busy_stages_in(run.cells)
    rows = [_row(c, reference_of(run, c).tpspd(), stages,
                 workers) | busy_columns(c, busy) for c in run.cells]
    # beside the speedup column, a ratio of TPSPD medians: the prediction by the same estimator
    sp = (speedup_frame(run).set_index("cell")["predicted_median_ratio"].to_dict() if run.cells
          else {})
    for row, c in zip(rows, run.cells):
        row["predicted_speedup"] = sp.get(c.name)
        row["rollout_share"] = rollout_share(c.result, c.events) if colocated(c) else None
    columns = BASE_COLUMNS + [f"stage_{s}_s" for s in stages] + [f"idle_{w}_pct" for w in workers] \
        + [f"busy_{s}_pct" for s in busy] + (["busy_clock"] if busy else []) + TAIL_COLUMNS
    if has_fact_split(run.cells):  # data.split fact: held-out and seen-fact accuracy side by side
        columns += HELDOUT_COLUMNS
        for row, c in zip(rows, run.cells):
            row.update(heldout_columns(c))
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
    row.update(weight_sync_columns(c))
    row["host_cpu_pct"] = host_cpu_pct(c)
    stage_s, idle = agg.get("stage_s") or {}, agg.get("idle_frac") or {}
    for s in stages:
        row[f"stage_{s}_s"] = stage_s.get(s, 0.0) if agg else None
    for w in workers:
        row[f"idle_{w}_pct"] = 100.0 * idle[w] if w in idle else None
    return row


def weight_sync_columns(c: CellData) -> dict:
    """What moving the trainer's weights into the rollout engines costs per measured iteration:
    seconds of weight_sync stages summed over workers (the trainer's publish and every rollout
    engine's load: vLLM reloads in place, the built-in sampler copies from shared memory), and the
    backend."""
    stage_s = c.aggregates.get("stage_s") or {}
    return {"rollout_backend": c.config.rollout.backend,
            "weight_sync_s_per_iter": stage_s.get("weight_sync") if c.aggregates else None}


def host_cpu_pct(c: CellData) -> float | None:
    """Host CPU % of a core: the driver's CPU seconds over the iteration's wall time
    (core/record/hostcpu.py), median over the measured iterations; None where it was not
    measured."""
    vals = [it["host_cpu_pct"] for it in c.measured() if it.get("host_cpu_pct") is not None]
    return float(np.median(vals)) if vals else None


def _eval(c: CellData, index: int, key: str) -> float | None:
    """key of the first (0) or last (-1) evaluation; None where there is none."""
    evals = c.result.get("evals") or []
    return evals[index].get(key) if evals else None
