"""The history page (`rlbench history FILE --html PAGE`): per workload, each metric's series relative to the
anchor commit (one plot per metric family, a line per metric), its change points marked, the A/Bs made
directly against the anchor beside the chained levels, and the tables behind them. Renders what
bench/check/history.py and bench/check/drift.py compute; one self-contained file like report.html.
"""
from __future__ import annotations

import base64
import io
from pathlib import Path

from matplotlib.figure import Figure

from rlbench.check import drift, history
from rlbench.core.results.metric_table import family
from rlbench.reports.html import CSS, esc, table
from rlbench.reports.palette import CELL_COLORS

MAX_LINES = 10  # a family with more metrics shows the ones that moved most (every level is in the table)


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None}, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _family_plot(fam: str, series: dict, cps: list, anchors: list[tuple[int, dict]]) -> str:
    """One family's metrics against the step (0: the anchor): the chained level (line), change points
    (circled), the level measured directly by an A/B against the anchor (star, at that step)."""
    fig = Figure(figsize=(9, 3.4))
    ax = fig.add_subplot()
    moved = sorted(series, key=lambda n: -max(abs(p.level - 1) for p in series[n]))[:MAX_LINES]
    for k, name in enumerate(sorted(moved)):
        color = CELL_COLORS[k % len(CELL_COLORS)]
        pts = series[name]
        ax.plot(range(len(pts)), [p.level for p in pts], marker="o", ms=3, color=color, label=name, lw=1.2)
        for cp in (c for c in cps if c.metric == name):
            ax.plot([cp.position], [pts[cp.position].level], "o", ms=12, mfc="none", mec="#b3261e", mew=2)
        step_of = {p.index: i for i, p in enumerate(pts)}
        for i, e in anchors:
            m = e["metrics"].get(name)
            at = max((s for idx, s in step_of.items() if idx <= i), default=None)
            if m and at is not None:
                ax.plot([at], [m["ratio"]], "*", ms=12, color=color, mec="black")
    ax.axhline(1.0, color="#888", lw=0.8)
    ax.set_xlabel("step (0: the anchor commit)")
    ax.set_ylabel("level / anchor")
    ax.set_title(f"{fam}: chained new / old (○ change point, ★ A/B against the anchor)", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return f'<figure><img alt="{esc(fam)}" src="data:image/png;base64,{_png(fig)}"></figure>'


def _workload_html(entries: list[dict], wl: dict, last_n: int) -> str:
    anchor, _ = history.anchor_of(entries, wl)
    series = history.series(entries, wl)
    cps = drift.all_change_points(entries, wl)
    anchors = drift.anchor_entries(entries, wl)
    verdict = drift.judge(entries, wl, last_n)
    steps = sum(e["kind"] == "step" for _, e in history.same_workload(entries, wl))
    parts = [f"<h2>{esc(wl['config'])} --ablation {esc(wl['ablation'])}</h2>",
             f"<p class='meta'>{steps} step(s) from the anchor commit {esc(str(anchor)[:12])}; a regression's "
             f"change point among the last {last_n} steps fails <code>rlbench check --record</code>.</p>"]
    if verdict.failures:
        parts.append("<p class='warn'>" + "<br>".join(esc(f"DRIFT: {drift.describe(cp)}; {said}")
                                                      for cp, said in verdict.failures) + "</p>")
    parts.append(table([[("regression" if c.bad else "improvement"), c.metric, c.commit[:10], f"{c.size:+.1%}",
                         c.pvalue, c.steps_ago] for c in cps],
                       ["change point", "metric", "commit", "size", "p-value", "steps ago"])
                 if cps else "<p>No change point (Otava, p &lt; %g, beyond each metric's floor).</p>" % drift.MAX_PVALUE)
    by_family: dict[str, dict] = {}
    for name, pts in series.items():
        by_family.setdefault(family(name), {})[name] = pts
    parts += [_family_plot(fam, s, cps, anchors) for fam, s in by_family.items()]
    if anchors:
        parts.append("<h3>A/Bs against the anchor</h3>" + table(
            [[e["date"][:10], e["new_commit"][:10], n, f"{m['ratio'] - 1:+.1%}", m["mark"]]
             for _, e in anchors for n, m in e["metrics"].items() if m["mark"] != "not significant"]
            or [["-", "-", "nothing flagged", "", ""]], ["date", "commit", "metric", "new / anchor", "mark"]))
    rows = [[n, f"{pts[-1].level - 1:+.1%}", _interval(pts[-1]), len(pts) - 1] for n, pts in series.items()]
    parts.append("<details><summary>Every metric's level at the last step</summary>"
                 + table(rows, ["metric", "level - 1", "95% interval", "steps"]) + "</details>")
    return "".join(parts)


def _interval(p: history.Point) -> str:
    return f"[{p.low - 1:+.1%}, {p.high - 1:+.1%}]" if p.low is not None and p.high is not None else "-"


def write_history_html(entries: list[dict], path: Path, out: Path, last_n: int = drift.LAST_N) -> Path:
    """Write the page to `out` (atomically); -> its path."""
    workloads = list({drift._key(e["workload"]): e["workload"] for e in entries}.values())
    body = "".join(_workload_html(entries, wl, last_n) for wl in workloads) or "<p>No entries yet.</p>"
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>rlbench check history</title>"
            f"<style>{CSS}</style></head><body><h1>rlbench check: history of accepted A/B results</h1>"
            f"<p class='meta'>{esc(str(path))}: {len(entries)} entries, {esc(entries[0]['date'][:10]) if entries else ''}"
            f"–{esc(entries[-1]['date'][:10]) if entries else ''}. Levels are chained ratios new / old relative to "
            "the anchor commit (each ratio measured on one machine in one A/B run).</p>" + body + "</body></html>")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page)
    tmp.replace(out)  # a reader never sees half a page
    return out
