"""Calibration from a run's data-parallel sync cell, and the check against the run's own cells.

The calibration is the report's (rlbench.core.costmodel.predict.measurements): per measured
iteration, the sync ranks' decode-step seconds by batch bucket and cache window and refill seconds,
seconds per trained token, optimizer-step and weight-sync seconds, with that iteration's response
lengths. validate() predicts each cell of the run as the report's measured-vs-predicted table does
(rlbench.analysis.speedup. speedup_frame over rlbench.core.costmodel.predict.predict_async), so the
two give the same numbers; a sync cell's row is in-sample. bounded_async cells, which the report
does not predict, go through the simulator's bounded model on the same costs.
"""
from __future__ import annotations

from pathlib import Path

from rlbench.core import schedules
from rlbench.core.config_files import recorded_config
from rlbench.core.costmodel.predict import measurements
from rlbench.core.costmodel.sync_measurements import SyncMeasurements
from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.core.schedules.spec import MODEL_COLOCATED


def _schedule(cell: dict) -> str:
    return (cell.get("switches") or {}).get("schedule") or recorded_config(cell).engine.schedule


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
    raise UserError(f"{run_dir}: no sync cell with measured iterations to calibrate from (cells: "
                    f"{found}); "
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
    """Predict every cell of the run as the report does (rlbench.analysis.speedup.predict_cells)."""
    # inside: the analysis imports pandas and scipy; `rlbench --help` imports this package
    from rlbench.analysis.data import load
    from rlbench.analysis.speedup import predict_cells

    load_cells(Path(run_dir))  # a clear error for a missing folder
    return predict_cells(load(Path(run_dir)))
