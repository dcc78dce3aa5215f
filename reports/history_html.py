"""The history page (`rlbench history FILE --html PAGE`): per workload, each metric's series
relative to the anchor commit (one plot per metric family, a line per metric), its change points
marked, the levels measured by A/Bs directly against the anchor, and the tables behind them. Renders
the page model that bench/check/history_command.py builds from the history (bench/check/history.py,
drift.py); computes nothing. One self-contained file like report.html.
"""
from __future__ import annotations

import base64
import io
from pathlib import Path

from matplotlib.figure import Figure

from rlbench.reports.html import CSS, esc, table, write_page
from rlbench.reports.palette import CELL_COLORS


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None}, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _family_plot(fam: str, plot: dict) -> str:
    """One family's metrics against the step (0: the anchor): {"series": {metric: [level]}, "marks":
    {metric: [step of a change point]}, "stars": {metric: [(step, level measured against the
    anchor)]}}."""
    fig = Figure(figsize=(9, 3.4))
    ax = fig.add_subplot()
    for k, (name, levels) in enumerate(sorted(plot["series"].items())):
        color = CELL_COLORS[k % len(CELL_COLORS)]
        ax.plot(range(len(levels)), levels, marker="o", ms=3, color=color, label=name, lw=1.2)
        for step in plot["marks"].get(name, []):
            ax.plot([step], [levels[step]], "o", ms=12, mfc="none", mec="#b3261e", mew=2)
        for step, level in plot["stars"].get(name, []):
            ax.plot([step], [level], "*", ms=12, color=color, mec="black")
    ax.axhline(1.0, color="#888", lw=0.8)
    ax.set_xlabel("step (0: the anchor commit)")
    ax.set_ylabel("level / anchor")
    ax.set_title(f"{fam}: chained new / old (○ change point, ★ A/B against the anchor)",
                 fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return f'<figure><img alt="{esc(fam)}" src="data:image/png;base64,{_png(fig)}"></figure>'


def _workload_html(w: dict) -> str:
    parts = [f"<h2>{esc(w['title'])}</h2>", f"<p class='meta'>{esc(w['meta'])}</p>"]
    if w["drift"]:
        parts.append("<p class='warn'>" + "<br>".join(esc(line) for line in w["drift"]) + "</p>")
    parts.append(table(w["change_points"], w["change_point_head"]) if w["change_points"]
                 else f"<p>{esc(w['no_change_point'])}</p>")
    parts += [_family_plot(fam, plot) for fam, plot in w["plots"].items()]
    parts.append("<h3>A/Bs against the anchor</h3>" + (table(w["anchors"],
                                                             w["anchor_head"]) if w["anchors"]
                                                      else "<p>None recorded yet.</p>"))
    parts.append("<details><summary>Every metric's level at the last step</summary>"
                 + table(w["levels"], w["level_head"]) + "</details>")
    return "".join(parts)


def write_history_html(page: dict, out: Path) -> Path:
    """Write the page ({"title", "meta", "workloads": [...]}, bench/check/history_command.py page)
    to `out`, atomically; -> its path."""
    body = "".join(_workload_html(w) for w in page["workloads"]) or "<p>No entries yet.</p>"
    html = (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(page['title'])}</title>"
            f"<style>{CSS}</style></head><body><h1>{esc(page['title'])}</h1>"
            f"<p class='meta'>{esc(page['meta'])}</p>{body}</body></html>")
    return write_page(html, out)
