"""build_report: tables, plots and report.html for any valid run folder (one cell or an ablation)."""
from __future__ import annotations

from pathlib import Path

from rlbench.reports.data import load
from rlbench.reports.html import write_html
from rlbench.reports.plots import write_plots
from rlbench.reports.tables import write_summary


def build_report(run_dir) -> Path:
    """Write summary.csv, summary.md, plots/*.png and report.html into run_dir; returns the HTML path.

    Works on whatever was measured: a single cell, an ablation, a cell that was interrupted or failed
    with zero iterations. Raises rlbench.errors.UserError when run_dir is not a run folder.
    """
    run = load(run_dir)
    df, sp = write_summary(run)
    plots = write_plots(run, df, sp)
    return write_html(run, df, sp, plots)
