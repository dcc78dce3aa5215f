"""A run's reports with every registered experiment's section: the reports' entry points
(rlbench.reports), given the experiments' registry (rlbench.experiments), which is above them. What
`rlbench run` writes at its end and `rlbench report` prints and writes."""
from __future__ import annotations

from pathlib import Path

from rlbench.experiments import EXPERIMENTS
from rlbench.reports import build, console, markdown


def build_report(run_dir, add=()) -> Path:
    """summary.csv, summary.md, plots and report.html (rlbench.reports.build.build_report)."""
    return build.build_report(run_dir, add, experiments=tuple(EXPERIMENTS.values()))


def summary_table_text(run_dir, add=(), wide: bool = False) -> str:
    """What the terminal prints (rlbench.reports.console.summary_table_text)."""
    return console.summary_table_text(run_dir, add, wide, experiments=tuple(EXPERIMENTS.values()))


def markdown_report(run_dir, add=()) -> str:
    """`rlbench report --markdown` (rlbench.reports.markdown.markdown_report)."""
    return markdown.markdown_report(run_dir, add, experiments=tuple(EXPERIMENTS.values()))
