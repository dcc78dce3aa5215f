"""families: the async families side by side on the same devices, as a ladder of factors (README.md).

This folder is the whole experiment: this record, cells.py (the rungs and their cells), analysis.py
(families.csv and the verdict's answer) and report.py (its place in every report). Importing the record
costs nothing: the analysis and the report are named by string.
"""
from rlbench.core.experiments.spec import ExperimentSpec
from rlbench.experiments.families import cells

EXPERIMENT = ExperimentSpec(
    name="families",
    summary="sync, barrier, periodic-async, one-step-off, k=2, k=2 + partial rollout: what each step adds",
    cells=cells.ablations, about={"families": cells.ABOUT},
    analysis="rlbench.experiments.families.analysis:ANALYSIS", report="rlbench.experiments.families.report:REPORT")
