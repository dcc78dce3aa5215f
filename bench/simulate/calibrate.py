"""Calibration from a run's data-parallel sync cell, and the check against the run's own cells.

The calibration is the report's (rlbench.core.costmodel.predict.measurements): per measured iteration, the
sync ranks' decode-step seconds by sequences in flight and refill seconds, seconds per trained token,
optimizer-step and weight-sync seconds, with that iteration's response lengths. validate() predicts
each cell of the run as the report's measured-vs-predicted table does (rlbench.reports.tables.
speedup_frame over rlbench.core.costmodel.predict.predict_async), so the two give the same numbers; a sync
cell's row is in-sample. bounded_async cells, which the report does not predict, go through the
simulator's bounded model on the same costs.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from rlbench.core import schedules
from rlbench.core.costmodel.predict import SyncMeasurements, measurements
from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.core.schedules.spec import MODEL_BOUNDED, MODEL_COLOCATED, MODEL_POOLS


def _schedule(cell: dict) -> str:
    return (cell.get("switches") or {}).get("schedule") or \
        ((cell.get("config") or {}).get("engine") or {}).get("schedule", "?")


def _engine(cell: dict) -> dict:
    return (cell.get("config") or {}).get("engine") or {}


def load_cells(run_dir: Path) -> list[dict]:
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise UserError(f"{run_dir}: run folder not found")
    return schema.load_run(run_dir)


def find_sync_cell(cells: list[dict], run_dir: Path) -> dict:
    for c in cells:
        spec = schedules.get(_schedule(c))
        if spec is not None and spec.model == MODEL_COLOCATED and c.get("iterations"):
            return c
    found = ", ".join(f"{c.get('cell')} ({_schedule(c)})" for c in cells) or "none"
    raise UserError(f"{run_dir}: no sync cell with measured iterations to calibrate from (cells: {found}); "
                    "run e.g. `rlbench run --ablation async` first")


def _inputs(cell: dict) -> tuple[list[dict], list[dict]]:
    d = Path(cell["_dir"])
    samples = schema.load_samples(d)
    if not samples:
        raise UserError(f"{d}: no samples.jsonl rows (response lengths) to calibrate from")
    return samples, schema.load_events(d)


def calibrate(run_dir: Path) -> tuple[list[SyncMeasurements], dict]:
    """-> (one batch per measured iteration of the sync cell, that sync cell)."""
    run_dir = Path(run_dir)
    cell = find_sync_cell(load_cells(run_dir), run_dir)
    samples, events = _inputs(cell)
    return measurements(cell, samples, events), cell


def validate(run_dir: Path) -> list[dict]:
    """Predict every cell of the run as the report does (rlbench.reports.tables: each cell from the sync
    cell of its workload and switches, speedups over the first cell of its workload).

    periodic_async cells: the report's measured-vs-predicted rows themselves; sync cells: their own
    measurements replayed (in-sample); bounded_async cells: the simulator's bounded model on their sync
    twin's costs (partial.py's with partial rollout). -> one row per cell: cell, schedule, overlap,
    partial_rollout, split, devices, measured and predicted median TPSPD, error (predicted / measured - 1),
    measured and predicted speedup, predicted_from."""
    from rlbench.reports.data import load

    load_cells(Path(run_dir))  # a clear error for a missing folder
    return predict_cells(load(Path(run_dir)))


def predict_cells(run) -> list[dict]:
    """validate() over a loaded run (rlbench.reports.data.RunData)."""
    from rlbench.reports.tables import reference_of, speedup_frame, sync_twin
    from rlbench.simulate.events import simulate

    report = speedup_frame(run).set_index("cell")
    rows = []
    for c in run.cells:
        med, ref, twin = c.tpspd(), reference_of(run, c).tpspd(), sync_twin(run, c)
        spec = schedules.get(c.schedule)
        if spec is None or not med or twin is None:
            continue
        eng = _engine(c.result)
        n, m = int(eng.get("rollout_devices") or 1), int(eng.get("train_devices") or 1)
        devices = int(c.devices or n + m)
        pred = None
        if spec.model == MODEL_POOLS:
            sp = report.loc[c.name, "predicted_speedup"] if c.name in report.index else None
            pred = None if sp is None or sp != sp else float(sp) * ref  # NaN: the report has no prediction
        else:
            batches = measurements(twin.result, twin.samples, twin.events)
            if spec.model == MODEL_COLOCATED and twin is c:  # in-sample: the measured ranks, each its shard
                walls = [b.sync_time()[0] for b in batches]
                pred = statistics.median(b.tokens / (w * devices) for b, w in zip(batches, walls))
            elif spec.model == MODEL_BOUNDED:
                k = int(eng.get("max_staleness", 1) or 0)
                res = simulate(batches, c.schedule, n, m, staleness=k, partial_rollout=bool(eng.get("partial_rollout")),
                               resume_kv=eng.get("resume_kv") or "recompute")
                pred = res.tpspd * (n + m) / devices
        if pred is None:
            continue
        rows.append({"cell": c.name, "schedule": c.schedule, "overlap": eng.get("overlap", True) is not False,
                     "partial_rollout": bool(eng.get("partial_rollout")),
                     "rollout_devices": n, "train_devices": m, "devices": devices, "predicted_from": twin.name,
                     "measured_tpspd": med, "predicted_tpspd": pred, "error": pred / med - 1,
                     "measured_speedup": schema.ratio(med, ref), "predicted_speedup": schema.ratio(pred, ref)})
    return rows
