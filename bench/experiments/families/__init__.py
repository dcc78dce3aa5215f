"""families: the async families side by side on the same devices, as a ladder of factors
(README.md).

This folder is the whole experiment: this record, cells.py (the rungs and their cells), analysis.py
(families.csv and the verdict's answer) and report.py (its place in every report). Importing the
record costs nothing: the analysis and the report are imported on first use.
"""
from rlbench.core.experiments.spec import ExperimentSpec
from rlbench.experiments.families import cells


def _analysis():
    from rlbench.experiments.families.analysis import ANALYSIS  # inside: pandas, not for `--help`
    return ANALYSIS


def _report():
    from rlbench.experiments.families.report import REPORT  # inside: pandas, not for `--help`
    return REPORT


EXPERIMENT = ExperimentSpec(
    name="families",
    summary="sync, barrier, periodic-async, one-step-off, k=2, k=2 + partial rollout: what each "
            "step adds",
    cells=cells.ablations, about={"families": cells.ABOUT},
    analysis=_analysis, report=_report)
