"""Gantt timeline of every worker's stages over up to 3 measured iterations, one panel per cell.

Workers are rows; each stage event is a bar in its Stage colour (palette.py), queue waits are pale
and hatched, and white gaps are idle time: the sync cell's one colocated worker runs phase after
phase, while periodic-async shows the trainer's per-group work overlapping the rollout worker's
generation. Each panel has its own time axis (seconds from its first shown iteration's start; the
span is in its title): cells can differ by orders of magnitude, and the TPSPD plot compares them.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from rlbench.core.record.stages import OUTSIDE_STAGES, Stage
from rlbench.analysis.data import STAGE_ORDER, CellData, RunData, worker_sort_key
from rlbench.reports.palette import stage_color

MAX_ITERATIONS = 3
ROW_IN = 0.45  # figure height per worker row, inches


def shown_iterations(c: CellData, limit: int = MAX_ITERATIONS) -> list[int]:
    """The first `limit` measured iterations; for a cell without records, those its events name."""
    its = [it["iteration"] for it in c.measured()]
    if not its:
        its = sorted({e["iteration"] for e in c.events if e["stage"] not in OUTSIDE_STAGES})
    return its[:limit]


def _events(c: CellData, its: list[int]) -> list[dict]:
    keep = set(its)
    return [e for e in c.events if e["iteration"] in keep and e["stage"] not in OUTSIDE_STAGES]


def _draw(ax, c: CellData) -> set[str]:
    """Draw one cell's panel; returns the stages it used (for the shared legend)."""
    its = shown_iterations(c)
    events = _events(c, its)
    span = max((e["end"] for e in events), default=0) - min((e["start"] for e in events), default=0)
    shown = (f"iterations {', '.join(map(str, its))} in {span:.3g} s" if events
             else "nothing measured")
    ax.set_title(f"{c.name} ({c.schedule}, {c.status}): {shown}", fontsize=9, loc="left")
    if not events:
        ax.text(0.5, 0.5, "no stage events recorded", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_yticks([])
        return set()
    t0 = min(e["start"] for e in events)
    workers = sorted({e["worker"] for e in events}, key=worker_sort_key)
    bars: dict[tuple[int, str], list] = defaultdict(list)
    for e in events:
        bars[(workers.index(e["worker"]), e["stage"])].append((e["start"] - t0,
                                                               e["end"] - e["start"]))
    for (row, stage), xr in bars.items():
        idle = stage == Stage.QUEUE_WAIT.value
        ax.broken_barh(xr, (row - 0.38, 0.76), facecolors=stage_color(stage),
                       edgecolor="#999999" if idle else "none", hatch="///" if idle else None,
                       lw=0.3)
    _iteration_marks(ax, c, its, events, t0)
    idle_frac = c.aggregates.get("idle_frac") or {}
    ax.set_yticks(range(len(workers)),
                  [f"{w}\nidle {100 * idle_frac[w]:.0f}%" if w in idle_frac else w for w
                   in workers],
                  fontsize=8)
    ax.set_ylim(len(workers) - 0.5, -0.9)  # first worker on top, room for the iteration labels
    return {stage for _, stage in bars}


def _iteration_marks(ax, c: CellData, its: list[int], events: list[dict], t0: float) -> None:
    """Dotted line and label at the start of every shown iteration."""
    records = {it["iteration"]: it for it in c.iterations}
    for k in its:
        starts = [e["start"] for e in events if e["iteration"] == k]
        start = records[k]["start"] if k in records else min(starts, default=t0)
        ax.axvline(start - t0, color="black", lw=0.8, ls=":")
        ax.text(start - t0, -0.55, f" iter {k}", fontsize=8, va="center")


def plot_timeline(run: RunData, path: Path, save) -> Path:
    """One panel per cell, workers as rows; `save(fig, path)` writes the PNG."""
    rows = [max(1, len({e["worker"] for e in _events(c, shown_iterations(c))})) for c
            in run.cells] or [1]
    fig = Figure(figsize=(12, sum(ROW_IN * r + 1.1 for r in rows) + 0.6), layout="constrained")
    axes = fig.subplots(len(rows), 1, squeeze=False, gridspec_kw={"height_ratios": rows})[:, 0]
    used: set[str] = set()
    for ax, c in zip(axes, run.cells):
        used |= _draw(ax, c)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("seconds from the start of the panel's first shown iteration")
    order = [s for s in STAGE_ORDER if s in used] + sorted(used - set(STAGE_ORDER))
    handles = [Patch(facecolor=stage_color(s), hatch="///" if s == Stage.QUEUE_WAIT.value else None,
                     edgecolor="#999999", label=s) for s in order]
    if handles:
        # rows of at most 9, filled evenly (no lone entry on a row of its own)
        rows = -(-len(handles) // 9)
        fig.legend(handles=handles, loc="outside lower center", ncol=-(-len(handles) // rows),
                   fontsize=8,
                   frameon=False)
    fig.suptitle("Stage timeline per worker (gaps = idle)", fontsize=11)
    return save(fig, path)
