"""PNG plots of a run (matplotlib's Agg renderer through Figure objects: no pyplot, no GUI state).

Every function takes the run (and the tables built from it), writes one file and returns its path,
or None when the run has nothing to show for that plot.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rlbench.analysis.data import RunData, stages_in
from rlbench.reports.palette import cell_color, stage_color
from rlbench.reports.timeline import plot_timeline

DPI = 100
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]
# an experiment's plots are written by its report section after these (its record lists them:
# `stale` below)
PLOT_FILES = ("tpspd.png", "speedup.png", "stage_breakdown.png", "timeline.png",
              "reward_accuracy.png",
              "staleness.png")


def save(fig: Figure, path: Path) -> Path:
    """Write a PNG without matplotlib's default 'Software' text chunk (it holds a URL)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, metadata={"Software": None}, bbox_inches="tight")
    return path


def overlaid(i: int, color: str, label: str | None) -> dict:
    """Line style of cell i where cells' curves may coincide (on-policy cells learn alike): distinct
    dashes and hollow markers of falling size keep every curve visible on top of the others."""
    return {"color": color, "label": label, "ls": LINESTYLES[i % len(LINESTYLES)],
            "marker": MARKERS[i % len(MARKERS)], "ms": 7 - i % 4, "mfc": "none", "alpha": 0.9}


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def plot_tpspd(df: pd.DataFrame, path: Path) -> Path:
    """Median TPSPD per cell (tokens/s/device), min–max error bars, speedup vs reference on top."""
    fig = Figure(figsize=(max(5.0, 1.3 * len(df) + 2), 4))
    ax = fig.subplots()
    med = [_num(v) for v in df["tpspd_median"]]
    lo = [m - _num(v) if not math.isnan(m) else 0 for m, v in zip(med, df["tpspd_min"])]
    hi = [_num(v) - m if not math.isnan(m) else 0 for m, v in zip(med, df["tpspd_max"])]
    x = range(len(df))
    heights = [0 if math.isnan(m) else m for m in med]
    ax.bar(x, heights, yerr=[lo, hi], capsize=6, color=[cell_color(i) for i in x], alpha=0.85)
    top = max([h + e for h, e in zip(heights, hi)] + [0.0]) or 1.0  # 1.0: nothing measured
    for i, (h, s) in enumerate(zip(heights, df["speedup"])):
        label = "no data" if math.isnan(med[i]) else f"{_num(s):.2f}×"
        ax.text(i, h + hi[i] + 0.02 * top, label, ha="center", va="bottom", fontsize=10)
    many = len(df) > 3
    ax.set_xticks(list(x), list(df["cell"]), rotation=20 if many else 0,
                  ha="right" if many else "center")
    ax.set_ylim(0, top * 1.18)
    ax.set_ylabel("TPSPD (tokens / s / device)")
    ax.set_title("TPSPD per cell: median over measured iterations, bars min–max; label: speedup vs "
                 f"{df['cell'].iloc[0] if len(df) else '?'}", fontsize=10)
    return save(fig, path)


def plot_stage_breakdown(run: RunData, df: pd.DataFrame, path: Path) -> Path:
    """Mean seconds per measured iteration in each stage (summed over workers), stacked per cell;
    a black marker shows the median iteration wall time."""
    stages = [s for s in stages_in(run.cells)
              # nan > 0 is False
              if f"stage_{s}_s" in df and any(_num(v) > 0 for v in df[f"stage_{s}_s"])]
    fig = Figure(figsize=(max(6.0, 1.3 * len(df) + 4), 4.2))
    ax = fig.subplots()
    x = list(range(len(df)))
    bottom = [0.0] * len(df)
    for s in stages:
        vals = [0.0 if math.isnan(_num(v)) else _num(v) for v in df[f"stage_{s}_s"]]
        ax.bar(x, vals, bottom=bottom, color=stage_color(s), label=s, width=0.6,
               hatch="//" if s == "queue_wait" else None, edgecolor="white", linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.scatter(x, [_num(v) for v in df["wall_s_median"]], marker="D", color="black", zorder=3,
               label="iteration wall time")
    ax.set_xticks(x, list(df["cell"]), rotation=20 if len(df) > 3 else 0)
    ax.set_ylabel("seconds per iteration (mean, summed over workers)")
    ax.set_title("Stage-time breakdown per cell", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return save(fig, path)


def plot_reward_accuracy(run: RunData, path: Path) -> Path:
    """Training reward mean per iteration and eval pass@1 per evaluation, every cell overlaid."""
    fig = Figure(figsize=(11, 3.8))
    ax_r, ax_a = fig.subplots(1, 2)
    for i, c in enumerate(run.cells):
        style = overlaid(i, cell_color(i), c.name)
        its = c.iterations
        ax_r.plot([it["iteration"] for it in its], [it["reward_mean"] for it in its], **style)
        ev = c.result.get("evals") or []
        ax_a.plot([e["iteration"] for e in ev], [e["accuracy"] for e in ev], **style)
    ax_r.set(xlabel="iteration", ylabel="reward mean", title="Training reward per iteration")
    ax_a.set(xlabel="iterations trained", ylabel="pass@1 (greedy)", title="Eval accuracy",
             ylim=(-0.02, 1.02))
    for ax in (ax_r, ax_a):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.title.set_fontsize(10)
        if run.cells:
            ax.legend(fontsize=8)
    return save(fig, path)


def plot_staleness(run: RunData, path: Path) -> Path:
    """Histogram of sample staleness (trained_version - behaviour_version, in weight versions)."""
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    counts = [c.staleness_counts() for c in run.cells]
    values = sorted(set().union(*counts)) if counts else []
    width = 0.8 / max(1, len(run.cells))
    for i, (c, cnt) in enumerate(zip(run.cells, counts)):
        ax.bar([v + (i - (len(run.cells) - 1) / 2) * width for v in values],
               [cnt.get(v, 0) for v in values], width=width, color=cell_color(i), label=c.name)
    if not values:
        ax.text(0.5, 0.5, "no samples recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks(values or [0])
    ax.set_xlim(min(values, default=0) - 1, max(values, default=0) + 1)
    ax.set(xlabel="staleness (trained version − behaviour version)", ylabel="samples",
           title="Staleness of trained samples (periodic-async must be 0 everywhere)")
    ax.title.set_fontsize(10)
    if values:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save(fig, path)


def plot_speedup(sp: pd.DataFrame, path: Path) -> Path | None:
    """Measured vs predicted speedup (TPSPD ratio over the reference) per async cell."""
    if not len(sp):
        return None
    series = [("measured_speedup", "measured", "#333333"),
              ("predicted_speedup", "predicted", stage_color("rollout"))]
    fig = Figure(figsize=(max(5.0, 1.8 * len(sp) + 3), 3.8))
    ax = fig.subplots()
    width = 0.8 / len(series)
    for j, (col, label, color) in enumerate(series):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(sp))]
        vals = [_num(v) for v in sp[col]]
        ax.bar(xs, [0 if math.isnan(v) else v for v in vals], width=width, color=color, label=label)
        for xv, v in zip(xs, vals):
            ax.text(xv, 0 if math.isnan(v) else v, "n/a" if math.isnan(v) else f"{v:.2f}×",
                    ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xticks(range(len(sp)),
                  [f"{c}\nfrom {r}" for c, r in zip(sp["cell"], sp["predicted_from"])],
                  fontsize=8)
    ax.set(ylabel="speedup (TPSPD ratio)", title="Periodic-async speedup: measured vs predicted")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save(fig, path)


def write_plots(run: RunData, df: pd.DataFrame, sp: pd.DataFrame, stale=()) -> dict[str, Path]:
    """All plots under <run>/plots/; returns {title: path} in report order. stale: the experiments'
    plot files, removed with these (their sections write them again where the run is theirs)."""
    d = run.path / "plots"
    for name in (*PLOT_FILES, *stale):  # no stale plot from an earlier report of this folder
        (d / name).unlink(missing_ok=True)
    out = {"TPSPD per cell": plot_tpspd(df, d / "tpspd.png"),
           "Measured vs predicted speedup": plot_speedup(sp, d / "speedup.png"),
           "Stage-time breakdown": plot_stage_breakdown(run, df, d / "stage_breakdown.png"),
           "Timeline of worker stages": plot_timeline(run, d / "timeline.png", save),
           "Reward and accuracy": plot_reward_accuracy(run, d / "reward_accuracy.png"),
           "Staleness": plot_staleness(run, d / "staleness.png")}
    return {k: v for k, v in out.items() if v is not None}

