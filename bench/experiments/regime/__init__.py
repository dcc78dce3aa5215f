"""regime: where periodic asynchrony pays, as a map of two axes (response-length tail x batch size),
each point sync, barrier and periodic-async on the same devices (README.md).

This folder is the whole experiment: this record, cells.py (the grids and their cells), probe.py
(the calibration step before the full map's cells), analysis.py (the map, its crossover and the
verdict's answer), text.py and plot.py (its sentences and plots) and report.py (its place in every
report). Importing the record costs nothing: the analysis, the report and the probe are imported on
first use.
"""
from rlbench.core.experiments.spec import ExperimentSpec
from rlbench.experiments.regime import cells


def _analysis():
    from rlbench.experiments.regime.analysis import ANALYSIS  # inside: pandas, not for `--help`
    return ANALYSIS


def _report():
    from rlbench.experiments.regime.report import REPORT  # inside: pandas, not for `--help`
    return REPORT


def _runner():
    from rlbench.experiments.regime.probe import RUNNER  # inside: pandas, not for `--help`
    return RUNNER


EXPERIMENT = ExperimentSpec(
    name="regime",
    summary="the async ladder over response-length tails x batch sizes: where periodic asynchrony "
            "pays",
    cells=cells.ablations, about=cells.ABOUT, workloads=cells.WORKLOADS,
    plots=("regime.png", "regime_lengths.png"),
    analysis=_analysis, report=_report,
    runner=_runner)
