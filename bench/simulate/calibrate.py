"""Calibration from a run's data-parallel sync cell, and the check against the run's own cells.

The calibration is the report's (rlbench.reports.predict.measurements): per measured iteration, the
sync ranks' decode-step seconds by sequences in flight and refill seconds, seconds per trained token,
optimizer-step and weight-sync seconds, with that iteration's response lengths. validate() predicts
each cell of the run from it with rlbench.reports.predict.predict_async, the function behind the
report's measured-vs-predicted table, so the two give the same numbers; sync's row is in-sample.
bounded_async cells, which the report does not predict, go through the simulator's bounded model.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from rlbench import schema
from rlbench.errors import UserError
from rlbench.reports.predict import SyncMeasurements, measurements, predict_async

KNOWN = ("sync", "periodic_async", "bounded_async")


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
        if _schedule(c) == "sync" and c.get("iterations"):
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


def _same_work(a: dict, b: dict) -> bool:
    """Cells a prediction from sync cell a applies to: same workload and optimisation switches."""
    keys = ("workload", "tri_model", "shared_prompt")
    return all((a.get("switches") or {}).get(k) == (b.get("switches") or {}).get(k) for k in keys)


def validate(run_dir: Path) -> list[dict]:
    """Predict every cell of the run of the sync cell's workload and switches from the sync cell.

    -> one row per cell: cell, schedule, split, devices, measured and predicted median TPSPD, error
    (predicted / measured - 1), measured and predicted speedup over the sync cell's measured TPSPD."""
    from rlbench.simulate.events import simulate

    batches, sync = calibrate(run_dir)
    samples, events = _inputs(sync)
    ref = ((sync.get("aggregates") or {}).get("tpspd") or {}).get("median")
    rows = []
    for cell in load_cells(Path(run_dir)):
        sched, eng = _schedule(cell), _engine(cell)
        med = ((cell.get("aggregates") or {}).get("tpspd") or {}).get("median")
        if sched not in KNOWN or not med or not _same_work(sync, cell):
            continue
        n, m = int(eng.get("rollout_devices") or 1), int(eng.get("train_devices") or 1)
        devices = int(cell.get("devices") or (cell.get("iterations") or [{}])[0].get("devices") or n + m)
        overlap = eng.get("overlap", True) is not False
        if sched == "sync":
            walls = [b.sync_time()[0] for b in batches]  # in-sample: the measured ranks, each its shard
            pred = statistics.median(b.tokens / (w * devices) for b, w in zip(batches, walls))
            iter_s = statistics.median(walls)
        elif sched == "periodic_async":
            p = predict_async(sync, samples, events, n, m, overlap=overlap, devices=devices, reference_tpspd=ref)
            pred, iter_s = p["predicted_tpspd"], p["predicted_iter_s"]
        else:
            k = int(eng.get("max_staleness", eng.get("staleness", 1)) or 0)
            res = simulate(batches, "bounded_async", n, m, staleness=k)
            pred, iter_s = res.tpspd * (n + m) / devices, res.iter_s
        rows.append({"cell": cell.get("cell"), "schedule": sched, "overlap": overlap, "rollout_devices": n,
                     "train_devices": m, "devices": devices, "measured_tpspd": med, "predicted_tpspd": pred,
                     "predicted_iter_s": iter_s, "error": pred / med - 1,
                     "measured_speedup": schema.ratio(med, ref), "predicted_speedup": schema.ratio(pred, ref)})
    return rows
