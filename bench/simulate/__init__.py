"""`rlbench simulate`: sync, periodic-async and bounded-async on N rollout + M training devices,
each device running at the per-device costs of the report's measured-vs-predicted model
(rlbench.core.costmodel.predict: decode-step seconds by batch bucket and cache window, seconds per
trained token, optimizer step, weight sync), measured in a run's data-parallel sync cell or stated
by a preset.

    model.py      batches (sync_measurements.SyncMeasurements) and their re-dealing to other device
    counts; stated costs events.py     the three schedules -> SimResult
    bounded.py    bounded staleness from the same costs
    calibrate.py  calibration from a run's sync cell; validate() predicts the run's own cells
    paper.py      the paper's setting (7B, GSM8K-like lengths, 64 devices) and its reported figures
    sweep.py      device-count / split sweeps, tables, simulate.json (what the CLI calls)
    plots.py      PNG plots

Pure Python over result files: no torch, no accelerator.
"""
from rlbench.simulate.calibrate import calibrate, validate
from rlbench.core.costmodel.simulate import SCHEDULES, SimResult, simulate
from rlbench.simulate.model import Costs, rescale
from rlbench.simulate.paper import PAPER_FIGURES, best_split, paper_batches, paper_setting
from rlbench.simulate.sweep import PRESETS, format_text, parse_list, run_simulation, sweep

__all__ = ["Costs", "SimResult", "SCHEDULES", "simulate", "calibrate", "validate", "rescale",
           "paper_batches", "paper_setting", "best_split", "PAPER_FIGURES", "PRESETS", "sweep",
           "run_simulation", "format_text", "parse_list"]
