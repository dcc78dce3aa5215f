"""Where a cell's start-up went (results.json `lifecycle`, core/record/lifecycle.py), one row per
cell: each start-up phase as long as its slowest process (the workers start side by side), then the
totals."""
from __future__ import annotations

from rlbench.analysis.data import RunData
from rlbench.core.record.lifecycle import Phase, phase_totals
from rlbench.core.record.stages import Role

PHASES = [p.value for p in Phase]


def startup_rows(run: RunData) -> list[dict]:
    """[{cell, weight_file ("built"/"mapped"), <phase>: s, first_iteration_s, startup_s, peak_rss_mb
    (driver), worker_peak_rss_mb (the largest worker's)}] of the cells that recorded their
    phases."""
    rows = []
    for c in run.cells:
        life = c.result.get("lifecycle") or {}
        by_process = life.get("startup_phases")
        if not by_process:
            continue
        peaks = life.get("peak_rss_mb") or {}
        workers = [v for w, v in peaks.items() if w != Role.DRIVER.value]
        rows.append({"cell": c.name, "weight_file": (c.result.get("model") or {}).get("weights"),
                     **phase_totals(by_process), "first_iteration_s": life.get("first_iteration_s"),
                     "startup_s": life.get("startup_s"),
                     "peak_rss_mb": peaks.get(Role.DRIVER.value),
                     "worker_peak_rss_mb": max(workers) if workers else None})
    return rows
