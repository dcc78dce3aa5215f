"""`rlbench simulate`: a discrete-event model of the sync, periodic-async and bounded-async schedules
on N rollout + M training devices, calibrated from a measured run (or a preset of the paper's
setting), predicting TPSPD, speedups and idle fractions at cluster scale.

    model.py      Calibration (per-device costs, scaling assumptions) and Workload (the batches)
    events.py     the event model of the three schedules -> SimResult
    calibrate.py  calibration from a run's sync cell; validate() predicts the run's own cells
    paper.py      the paper's setting (7B, GSM8K-like lengths, 64 devices) and its reported figures
    sweep.py      device-count / split sweeps, tables, simulate.json (what the CLI calls)
    plots.py      PNG plots

Pure Python + numpy over result files: no torch, no accelerator.
"""
from rlbench.simulate.calibrate import calibrate, validate
from rlbench.simulate.events import SCHEDULES, SimResult, simulate
from rlbench.simulate.model import Calibration, Workload, load_calibration, save_calibration
from rlbench.simulate.paper import PAPER_FIGURES, best_split, paper_preset, paper_setting
from rlbench.simulate.sweep import PRESETS, format_text, parse_list, run_simulation, sweep

__all__ = ["Calibration", "Workload", "SimResult", "SCHEDULES", "simulate", "calibrate", "validate",
           "load_calibration", "save_calibration", "paper_preset", "paper_setting", "best_split",
           "PAPER_FIGURES", "PRESETS", "sweep", "run_simulation", "format_text", "parse_list"]
