"""Per-stage hardware utilisation of every cell: MFU and memory-bandwidth utilisation against one device's
measured peak (results.json aggregates.utilisation, provenance.peak; bench/core/results/utilisation.py says how)."""
from __future__ import annotations

import pandas as pd
from rlbench.core.record.stages import Stage
from rlbench.analysis.data import RunData

COLUMNS = ["cell", "stage", "GFLOP/s per device", "MFU %", "GB/s per device", "bandwidth %"]
NOTE = ("Per device: a stage's counted work (VERL's FLOP count: 2N per token and pass plus attention; "
        "bytes for decoding: weights per decode step plus the K/V read) over its seconds summed across the "
        "workers that ran it, against one device's peak measured by `rlbench env` (a matmul and a copy "
        "probe on one core with one thread, on CPU). A stage near 100% runs at the hardware limit.")


def utilisation_frame(run: RunData) -> pd.DataFrame:
    """One row per cell and stage with utilisation figures (stages in Stage order); empty when none."""
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


def peak_text(run: RunData) -> str:
    """The peak the figures are measured against (the reference cell's), in words."""
    peak = next(((c.result.get("provenance") or {}).get("peak") for c in run.cells
                 if (c.result.get("provenance") or {}).get("peak")), None)
    if not peak:
        return "no peak recorded (runs from before rlbench measured one)"
    return (f"peak per device: {peak['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s ({peak.get('dtype')} matmul "
            f"n={peak.get('matmul_n')}), {peak['copy_bytes_per_s'] / 1e9:.1f} GB/s copy, on {peak.get('device')}")
