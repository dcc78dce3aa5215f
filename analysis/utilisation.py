"""Per-stage hardware utilisation of every cell, as utilisation.csv holds it: MFU and
memory-bandwidth utilisation against one device's measured peak (results.json
aggregates.utilisation, provenance.peak; core/results/utilisation.py says how they are counted)."""
from __future__ import annotations

import pandas as pd
from rlbench.analysis.data import RunData
from rlbench.core.record.stages import Stage

COLUMNS = ["cell", "stage", "GFLOP/s per device", "MFU %", "GB/s per device", "bandwidth %"]


def utilisation_frame(run: RunData) -> pd.DataFrame:
    """One row per cell and stage with utilisation figures (stages in Stage order); empty when
    none."""
    order = [s.value for s in Stage]
    rows = []
    for c in run.cells:
        util = c.aggregates.get("utilisation") or {}
        for stage in sorted(util, key=lambda s: order.index(s) if s in order else len(order)):
            u = util[stage]
            rows.append({"cell": c.name, "stage": stage,
                         "GFLOP/s per device": u["flops_per_s"] / 1e9, "MFU %": 100 * u["mfu"],
                         "GB/s per device": u["bytes_per_s"] / 1e9 if "bytes_per_s" in u else None,
                         "bandwidth %": 100 * u["bw_util"] if "bw_util" in u else None})
    return pd.DataFrame(rows, columns=COLUMNS)


def recorded_peak(run: RunData) -> dict | None:
    """The peak the figures are measured against: the first cell's that recorded one (the
    reference's)."""
    return next(((c.result.get("provenance") or {}).get("peak") for c in run.cells
                 if (c.result.get("provenance") or {}).get("peak")), None)
