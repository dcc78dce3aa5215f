"""The per-stage utilisation table's words (its figures: analysis/utilisation.py)."""
from __future__ import annotations

from rlbench.analysis.data import RunData
from rlbench.analysis.utilisation import recorded_peak

NOTE = ("Per device: a stage's counted work (VERL's FLOP count: 2N per token and pass plus "
        "attention; bytes for decoding: weights per decode step plus the K/V read) over its "
        "seconds summed across the workers that ran it, against one device's peak measured by "
        "`rlbench env` (a matmul and a copy probe on one core with one thread, on CPU). A stage "
        "near 100% runs at the hardware limit.")


def peak_text(run: RunData) -> str:
    """The peak the figures are measured against (the reference cell's), in words."""
    peak = recorded_peak(run)
    if not peak:
        return "no peak recorded (runs from before rlbench measured one)"
    return (f"peak per device: {peak['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s ({peak.get('dtype')} "
            f"matmul n={peak.get('matmul_n')}), {peak['copy_bytes_per_s'] / 1e9:.1f} GB/s copy, on "
            f"{peak.get('device')}")
