"""The comparison table: one row per cell (pandas), written as summary.csv and summary.md.

Units: TPSPD in tokens / s / device; token rates in tokens / s; stage columns are the mean seconds
per measured iteration (summed over workers); idle columns are percent of the iteration wall time.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from rlbench.core import schedules
from rlbench.core.costmodel.contention import predict_contended
from rlbench.core.costmodel.predict import predict_async, rollout_share
from rlbench.core.errors import UserError
from rlbench.reports.data import CellData, RunData, get_path, stages_in, workers_in
from rlbench.reports.heldout import COLUMNS as HELDOUT_COLUMNS
from rlbench.reports.heldout import has_fact_split, heldout_columns
from rlbench.reports.regime import regime_frame
from rlbench.reports.regime_text import regime_lines
from rlbench.reports.utilisation import NOTE as UTIL_NOTE
from rlbench.reports.utilisation import peak_text, utilisation_frame
from rlbench.core.results import metric_table, schema
from rlbench.core.results.metric_table import SUMMARY
from rlbench.core.schedules.spec import MODEL_POOLS

# The summary's columns: what the cell is, then the reported metrics as bench/core/results/metric_table.py lists them.
BASE_COLUMNS = ["cell", "schedule", "tri_model", "shared_prompt", "devices", *metric_table.names(SUMMARY, "head")]
# first/last evaluation's diagnostics (built-in evaluation only)
DIAGNOSTICS = ["format_rate_before", "format_rate_after", "accuracy_any_format_before",
               "accuracy_any_format_after", "worked_rate_before", "worked_rate_after"]
TAIL_COLUMNS = ["rollout_backend", *metric_table.names(SUMMARY, "tail"), "measured_iterations", "status"]


def summary_frame(run: RunData) -> pd.DataFrame:
    """One row per cell, reference cell first; NaN where a cell measured nothing."""
    stages, workers = stages_in(run.cells), workers_in(run.cells)
    rows = [_row(c, reference_of(run, c).tpspd(), stages, workers) for c in run.cells]
    sp = speedup_frame(run).set_index("cell")["predicted_speedup"].to_dict() if run.cells else {}
    for row, c in zip(rows, run.cells):
        row["predicted_speedup"] = sp.get(c.name)
        row["rollout_share"] = rollout_share(c.result, c.events) if _colocated(c) else None
    columns = BASE_COLUMNS + [f"stage_{s}_s" for s in stages] + [f"idle_{w}_pct" for w in workers] \
        + TAIL_COLUMNS
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
    """What moving the trainer's weights into the rollout engines costs per measured iteration: seconds
    of weight_sync stages summed over workers (the trainer's publish and every rollout engine's load:
    vLLM reloads in place, the built-in sampler copies from shared memory), and the backend."""
    stage_s = c.aggregates.get("stage_s") or {}
    return {"rollout_backend": get_path(c.result, "config.rollout.backend"),
            "weight_sync_s_per_iter": stage_s.get("weight_sync") if c.aggregates else None}


def host_cpu_pct(c: CellData) -> float | None:
    """Host CPU % of a core: the driver's CPU seconds over the iteration's wall time (bench/core/record/hostcpu.py),
    median over the measured iterations; None where it was not measured."""
    vals = [it["host_cpu_pct"] for it in c.measured() if it.get("host_cpu_pct") is not None]
    return float(np.median(vals)) if vals else None


def _eval(c: CellData, index: int, key: str) -> float | None:
    """key of the first (0) or last (-1) evaluation; None where there is none."""
    evals = c.result.get("evals") or []
    return evals[index].get(key) if evals else None


def speedup_frame(run: RunData) -> pd.DataFrame:
    """Measured vs predicted speedup of every periodic-async cell (bench/core/costmodel/predict.py).

    Each is predicted from the sync cell with the same switches and workload (its own measured
    device costs); both speedups are TPSPD ratios over the cell's reference (the first cell of its
    workload), so they stand beside the summary's speedup column."""
    rows = []
    for c in run.cells:
        sync = sync_twin(run, c)
        if _model(c) != MODEL_POOLS or sync is None:  # the report predicts the pools model
            continue
        ref = reference_of(run, c)
        r, t = _split(c)
        row = {"cell": c.name, "predicted_from": sync.name, "overlap": _overlap(c), "rollout_devices": r,
               "train_devices": t, "rollout_share_of_sync": None,
               "measured_speedup": schema.ratio(c.tpspd(), ref.tpspd()), "predicted_speedup": None, "error_pct": None,
               "predicted_with_contention": None, "contention_kappa": None, "contention_kappa_decode": None,
               "kappa_source": None}
        try:
            pred = predict_async(sync.result, sync.samples, sync.events, r, t, overlap=_overlap(c),
                                 devices=c.devices, reference_tpspd=ref.tpspd())
        except UserError:
            pred = None
        if pred:
            row.update(rollout_share_of_sync=pred["rollout_share"], predicted_speedup=pred["predicted_speedup"])
            if row["measured_speedup"] and pred["predicted_speedup"]:
                row["error_pct"] = 100 * (pred["predicted_speedup"] / row["measured_speedup"] - 1)
            if (r, t) == (1, 1):  # the proposed contention term: a column beside the model, never in it
                con = predict_contended(sync.result, sync.samples, sync.events, overlap=_overlap(c),
                                        devices=c.devices, reference_tpspd=ref.tpspd(), probe=run.probe)
                k = con["kappa"]
                row.update(predicted_with_contention=con["predicted_speedup"], kappa_source=con["kappa_source"],
                           contention_kappa=k[1] if isinstance(k, tuple) else k,
                           contention_kappa_decode=k[0] if isinstance(k, tuple) else None)
        rows.append(row)
    cols = ["cell", "predicted_from", "overlap", "rollout_devices", "train_devices", "rollout_share_of_sync",
            "measured_speedup", "predicted_speedup", "error_pct", "predicted_with_contention", "contention_kappa",
            "contention_kappa_decode", "kappa_source"]
    return pd.DataFrame(rows, columns=cols)


def attribution(sp: pd.DataFrame) -> list[dict]:
    """Per workload with a barrier cell: what the device split gives (barrier / sync) and what overlap
    adds (async / barrier), measured and predicted. Speedups multiply: total = split x overlap."""
    out = []
    for _, b in sp[~sp["overlap"]].iterrows() if len(sp) else []:
        prefix = b["cell"].rsplit("/", 1)[0] + "/" if "/" in b["cell"] else ""
        for _, a in sp[sp["overlap"] & sp["cell"].str.startswith(prefix)].iterrows():
            if a["predicted_from"] != b["predicted_from"]:
                continue
            out.append({"async": a["cell"], "barrier": b["cell"], "sync": a["predicted_from"],
                        "rollout_share_of_sync": a["rollout_share_of_sync"],
                        "split_measured": b["measured_speedup"], "split_predicted": b["predicted_speedup"],
                        "overlap_measured": schema.ratio(a["measured_speedup"], b["measured_speedup"]),
                        "overlap_predicted": schema.ratio(a["predicted_speedup"], b["predicted_speedup"]),
                        "total_measured": a["measured_speedup"], "total_predicted": a["predicted_speedup"]})
    return out


def attribution_text(rows: list[dict]) -> list[str]:
    """One sentence per attribution row, in words and numbers."""
    out = []
    for r in rows:
        def x(v):
            return "n/a" if _missing(v) else f"{v:.2f}×"
        share = "" if _missing(r["rollout_share_of_sync"]) else \
            f" (sync spends {100 * r['rollout_share_of_sync']:.0f}% of its iteration generating)"
        verdict = "wins" if (r["total_measured"] or 0) > 1.0 else "loses"
        out.append(f"{r['async']} vs {r['sync']}{share}: periodic asynchrony {verdict}, {x(r['total_measured'])} "
                   f"measured (predicted {x(r['total_predicted'])}) = device split alone {x(r['split_measured'])} "
                   f"(barrier cell {r['barrier']}; predicted {x(r['split_predicted'])}) × overlap "
                   f"{x(r['overlap_measured'])} (predicted {x(r['overlap_predicted'])}).")
    return out


def _colocated(c: CellData) -> bool:
    spec = schedules.get(c.schedule)
    return spec is not None and spec.colocated


def _model(c: CellData) -> str | None:
    spec = schedules.get(c.schedule)
    return spec and spec.model


def sync_twin(run: RunData, cell: CellData) -> CellData | None:
    """The sync cell of the same workload with the same optimisation switches, else that workload's first
    sync cell."""
    syncs = [s for s in run.cells if _colocated(s) and s.iterations
             and s.switches.get("workload") == cell.switches.get("workload")]
    same = [s for s in syncs if all(s.switches.get(k) == cell.switches.get(k)
                                    for k in ("tri_model", "shared_prompt"))]
    return (same or syncs or [None])[0]


def reference_of(run: RunData, cell: CellData) -> CellData:
    """The cell a speedup is relative to: the first cell of the same workload (regime sweeps), else the first."""
    same = [c for c in run.cells if c.switches.get("workload") == cell.switches.get("workload")]
    return (same or run.cells)[0]


def _overlap(c: CellData) -> bool:
    v = c.switches.get("overlap")
    return True if v is None else bool(v)


def _split(c: CellData) -> tuple[int, int]:
    eng = get_path(c.result, "config.engine") or {}
    return int(eng.get("rollout_devices") or 1), int(eng.get("train_devices") or 1)


COMPACT_HEAD = ["cell", "TPSPD median (min–max)", "speedup", "predicted", "rollout %", "rollout tok/s",
                "train tok/s", "weight sync s/iter", "host CPU % of a core", "idle % per worker", "acc before→after", "####-format %", "max stale", "status"]


def compact_rows(df: pd.DataFrame) -> list[list[str]]:
    """The headline columns (COMPACT_HEAD) of summary_frame rows, as text, for terminal and HTML."""
    idle_cols = [c for c in df.columns if c.startswith("idle_") and c.endswith("_pct")]
    return [_compact(r, idle_cols) for r in df.to_dict("records")]


def _compact(r: dict, idle_cols: list[str]) -> list[str]:
    tp = "–" if _missing(r["tpspd_median"]) else \
        f"{fmt(r['tpspd_median'])} ({fmt(r['tpspd_min'])}–{fmt(r['tpspd_max'])})"
    idle = ", ".join(f"{c[5:-4]} {r[c]:.0f}" for c in idle_cols if not _missing(r[c])) or "–"
    sp = "–" if _missing(r["speedup"]) else f"{r['speedup']:.2f}×"
    pred = "–" if _missing(r["predicted_speedup"]) else f"{r['predicted_speedup']:.2f}×"
    share = "–" if _missing(r["rollout_share"]) else f"{100 * r['rollout_share']:.0f}"
    acc = f"{fmt(r['accuracy_before'])}→{fmt(r['accuracy_after'])}"
    form = "–" if _missing(r["format_rate_before"]) or _missing(r["format_rate_after"]) else \
        f"{100 * r['format_rate_before']:.0f}→{100 * r['format_rate_after']:.0f}"
    host = "–" if _missing(r.get("host_cpu_pct")) else f"{r['host_cpu_pct']:.1f}"
    return [str(r["cell"]), tp, sp, pred, share, fmt(r["rollout_tok_s"]), fmt(r["train_tok_s"]), _weight_sync(r),
            host, idle, acc, form,
            fmt(r["staleness_max"]), str(r["status"])]


def _weight_sync(r: dict) -> str:
    """'0.0123 (vllm)': weight-sync seconds per iteration and the rollout backend that received them."""
    if _missing(r.get("weight_sync_s_per_iter")):
        return "–"
    backend = r.get("rollout_backend")
    return fmt(r["weight_sync_s_per_iter"]) + (f" ({backend})" if backend else "")


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
        md += ["\n## Where the speedup comes from\n"] + [f"- {t}" for t in attribution_text(attribution(sp))]
    regime = regime_lines(regime_frame(run, sp))
    if regime:
        md += ["\n## Where periodic asynchrony pays: the regime map\n"] + [f"- {t}" for t in regime]
    util = utilisation_frame(run)
    if len(util):
        util.to_csv(run.path / "utilisation.csv", index=False)
        md += ["\n## Hardware utilisation per stage\n", to_markdown(util), peak_text(run), "", UTIL_NOTE]
    (run.path / "summary.md").write_text("\n".join(md))
    return df, sp
