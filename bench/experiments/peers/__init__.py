"""peers: rlbench beside real frameworks, TRL's GRPOTrainer and VERL's trainer and recipes, on the
same devices and workload (README.md).

This folder is the whole experiment: this record, cells.py (the cells and which framework runs
each), run.py (the refusal before any cell runs and a framework's runner in the cell's process),
analysis.py (peers.csv) and report.py (its place in every report, peers.md). Importing the record
costs nothing: the analysis, the report and the runner are imported on first use.
"""
from rlbench.core.experiments.spec import ExperimentSpec
from rlbench.experiments.peers import cells


def _analysis():
    from rlbench.experiments.peers.analysis import ANALYSIS  # inside: pandas, not for `--help`
    return ANALYSIS


def _report():
    from rlbench.experiments.peers.report import REPORT  # inside: pandas, not for `--help`
    return REPORT


def _runner():
    from rlbench.experiments.peers.run import RUNNER  # inside: pandas, not for `--help`
    return RUNNER


EXPERIMENT = ExperimentSpec(
    name="peers",
    summary="rlbench's sync and periodic-async beside TRL's GRPOTrainer on the same devices",
    cells=cells.ablations, about={"peers": cells.ABOUT, "trl_on_policy": cells.ABOUT_TRL,
                                  cells.VERL_ABLATION: cells.ABOUT_VERL},
    shared={"peers": cells.BASE, "trl_on_policy": cells.BASE, cells.VERL_ABLATION: cells.VERL_BASE},
    switches=("framework", "framework_options"),
    analysis=_analysis, report=_report,
    runner=_runner)
