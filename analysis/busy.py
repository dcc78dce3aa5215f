"""Each stage's device busy time over its wall time, per cell (results.json aggregates.busy_frac,
from the per-iteration stage_busy the timer recorded: core/devices/busy.py says how each device is
measured).

The summary has one column per stage, `busy_<stage>_pct`, and `busy_clock` says whose busy time it
is: "GPU" (NVML's utilisation: a kernel running) on CUDA, "CPU" (the worker thread's CPU seconds) on
CPU.
"""
from __future__ import annotations

from rlbench.analysis.data import CellData
from rlbench.core.record.stages import Stage

# the stages a busy column is shown for: each iteration's device work, in Stage order
BUSY_STAGES = tuple(s.value for s in (Stage.ROLLOUT, Stage.OLD_LOGPROB, Stage.REF_LOGPROB,
                                      Stage.UPDATE,
                                      Stage.OPTIMIZER_STEP, Stage.WEIGHT_SYNC))


def busy_stages_in(cells: list[CellData]) -> list[str]:
    """The BUSY_STAGES any cell measured, in that order."""
    seen = {s for c in cells for s in (c.aggregates.get("busy_frac") or {})}
    return [s for s in BUSY_STAGES if s in seen]


def busy_columns(c: CellData, stages: list[str]) -> dict:
    """busy_<stage>_pct (None where the cell did not measure it) and busy_clock ("GPU", "CPU" or
    None)."""
    frac = c.aggregates.get("busy_frac") or {}
    row = {f"busy_{s}_pct": 100.0 * frac[s] if s in frac else None for s in stages}
    row["busy_clock"] = busy_clock(c) if frac else None
    return row


def busy_clock(c: CellData) -> str:
    """Whose busy time a cell's figures are: the GPU's on CUDA, else the CPU's."""
    device = ((c.result.get("provenance") or {}).get("device") or {}).get("type")
    if device is None:
        device = str(getattr(c.config.engine, "device", "cpu"))
    return "GPU" if device == "cuda" else "CPU"
