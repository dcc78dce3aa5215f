"""Plots of time-to-accuracy (analysis/accuracy.py): accuracy against training wall time and trained
samples per cell (one thin line per seed, the mean over seeds bold), and TPSPD against final
accuracy (one point per cell with its intervals): the speed / learning trade-off in one picture.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from rlbench.analysis.accuracy import Curve, mean_curve
from rlbench.reports.palette import cell_color
from rlbench.reports.plots import MARKERS, overlaid, save

ACCURACY_PLOT_FILES = ("accuracy_time.png", "tpspd_accuracy.png")
CAPTIONS = {
    "Accuracy against time and samples": "Greedy pass@1 (strict GSM8K rule) at every evaluation, "
                                         "against "
    "training wall time (the iterations' windows summed) and trained samples; thin lines: one seed "
    "each, bold: the mean over seeds; dashed: the time-to-accuracy target (the median of the "
    "per-seed targets).",
    "TPSPD against final accuracy": "One point per cell: median TPSPD (horizontal bar: spread over "
                                    "seeds) "
    "and final pass@1 (vertical bar: 95% interval). Up and right is better.",
}


def plot_accuracy_curves(all_curves: dict[str, list[Curve]], target: float | None,
                         path: Path) -> Path | None:
    """Strict pass@1 against training wall time (left) and trained samples (right)."""
    if not any(len(cv.accuracy) >= 2 for cvs in all_curves.values() for cv in cvs):
        return None
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    for ax, axis, label in zip(axes, ("wall_s", "samples"),
                               ("training wall time (s)", "trained samples")):
        for i, (cell, cvs) in enumerate(all_curves.items()):
            color = cell_color(i)
            for cv in cvs:
                if len(cvs) == 1:  # one seed: the cells' curves may coincide, each stays visible
                    ax.plot(getattr(cv, axis), cv.accuracy, lw=1.0, **overlaid(i, color, cell))
                else:
                    ax.plot(getattr(cv, axis), cv.accuracy, color=color, lw=0.8, alpha=0.35,
                            marker=MARKERS[i % len(MARKERS)], ms=3)
            mean = mean_curve(cvs, axis)  # seeds with the same evaluations
            if mean:
                ax.plot(*mean, color=color, lw=2.2, label=f"{cell} (mean of {len(cvs)} seeds)")
        if target is not None:
            ax.axhline(target, color="black", lw=0.8, ls="--", label=f"target {target:.3f}")
        ax.set(xlabel=label, ylabel="pass@1 (greedy, strict)", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
    axes[0].set_title("Accuracy against training wall time (evaluation excluded)", fontsize=10)
    axes[1].set_title("Accuracy against trained samples", fontsize=10)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save(fig, path)


def plot_tpspd_accuracy(table: pd.DataFrame, path: Path) -> Path | None:
    """One point per cell: median TPSPD (bars: spread over seeds) against final accuracy (bars: its
    95% interval)."""
    rows = table[table["tpspd_median"].notna()
                 & table["accuracy_final"].notna()] if len(table) else table
    if not len(rows):
        return None
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    records = rows.to_dict("records")
    # neighbours along TPSPD take turns at three heights, so that the names of close points do not
    # overlap
    height = {r["cell"]: 5 + 11 * (k % 3)
              for k, r in enumerate(sorted(records, key=lambda r: r["tpspd_median"]))}
    for i, r in enumerate(records):
        x, y = r["tpspd_median"], r["accuracy_final"]
        xerr = [[x - _or(r["tpspd_seed_min"], x)], [_or(r["tpspd_seed_max"], x) - x]]
        yerr = [[y - _or(r["accuracy_final_lo"], y)], [_or(r["accuracy_final_hi"], y) - y]]
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt=MARKERS[i % len(MARKERS)],
                    color=cell_color(i),
                    capsize=4, ms=7, label=r["cell"])
        ax.annotate(r["cell"], (x, y), fontsize=7, textcoords="offset points",
                    xytext=(5, height[r["cell"]]),
                    color=cell_color(i))
    ax.margins(x=0.1)  # room for the last point's name
    ax.set(xlabel="TPSPD (tokens / s / device), median", ylabel="final pass@1 (strict)",
           title="Throughput against what was learned (bars: spread over seeds, 95% interval)")
    ax.title.set_fontsize(10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save(fig, path)


def _or(v, default):
    return default if v is None or v != v else v


def write_accuracy_plots(all_curves: dict[str, list[Curve]], table: pd.DataFrame,
                         target: float | None,
                         folder: Path) -> dict[str, Path]:
    """{title: path} of the plots that have something to show, written under folder."""
    for name in ACCURACY_PLOT_FILES:
        (folder / name).unlink(missing_ok=True)
    out = {"Accuracy against time and samples": plot_accuracy_curves(all_curves, target,
                                                                     folder
                                                                     / ACCURACY_PLOT_FILES[0]),
           "TPSPD against final accuracy": plot_tpspd_accuracy(table,
                                                               folder / ACCURACY_PLOT_FILES[1])}
    return {k: v for k, v in out.items() if v is not None}
