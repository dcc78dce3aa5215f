"""`rlbench history FILE [--html PAGE]`: what the history of accepted A/B results says
(bench/check/history.py, bench/check/drift.py), as text (bench/check/history_text.py: the answer per
workload first, the detail below) and, with --html, as a page (the model built here, rendered by
reports/history_html.py). Exit 1 on a confirmed regression (a drift `rlbench check --record` would
fail), 2 on a corrupt or foreign file."""
from __future__ import annotations

from pathlib import Path

import typer
from rlbench.check import drift, history, history_text
from rlbench.core.results.metric_table import family

# a family with more metrics plots the ones that moved most (every level is in the table)
MAX_LINES = 10


def history_command(path: Path, html: Path | None, last_n: int) -> int:
    entries = history.read(path)
    if not Path(path).exists():
        typer.echo(f"{path}: no history yet (`rlbench check --record {path}` starts it)")
        return 0
    typer.echo(history_text.format_history(entries, path, last_n))  # the answer per workload first
    code = int(any(drift.judge(entries, wl, last_n).failures for wl in drift.workloads(entries)))
    if html is not None:
        # inside: matplotlib, for --html only
        from rlbench.reports.history_html import write_history_html

        typer.echo(f"history page: {write_history_html(page(entries, path, last_n), html)}")
    return code


def page(entries: list[dict], path: Path, last_n: int = drift.LAST_N) -> dict:
    """The history page's model: its title, and per workload the drift lines, tables and plots'
    data."""
    dates = f", {entries[0]['date'][:10]} to {entries[-1]['date'][:10]}" if entries else ""
    return {"title": "rlbench check: history of accepted A/B results",
            "meta": f"{path}: {len(entries)} entries{dates}. Levels are chained ratios new / old "
                    "relative to the anchor commit, each ratio measured on one machine in one A/B "
                    "run.",
            "workloads": [_workload(entries, wl, last_n) for wl in drift.workloads(entries)]}


def _workload(entries: list[dict], wl: dict, last_n: int) -> dict:
    anchor, _ = history.anchor_of(entries, wl)
    series = history.series(entries, wl)
    cps = drift.all_change_points(entries, wl)
    anchors = drift.anchor_entries(entries, wl)
    verdict = drift.judge(entries, wl, last_n)
    steps = sum(e["kind"] == "step" for _, e in history.same_workload(entries, wl))
    plots: dict[str, dict] = {}
    for fam in dict.fromkeys(family(n) for n in series):
        names = [n for n in series if family(n) == fam]
        moved = sorted(names, key=lambda n: -max(abs(p.level - 1) for p in series[n]))[:MAX_LINES]
        plots[fam] = {"series": {n: [p.level for p in series[n]] for n in moved},
                      "marks": {n: [c.position for c in cps if c.metric == n] for n in moved},
                      "stars": {n: _stars(series[n], anchors, n) for n in moved}}
    return {"title": history_text.title(wl),
            "meta": f"{steps} step(s) from the anchor commit {str(anchor)[:12]}; a regression's "
                    f"change point among the last {last_n} steps fails `rlbench check --record`.",
            "drift": [f"DRIFT: {history_text.describe(cp)}; {said}"
                      for cp, said in verdict.failures] +
                     [f"suspected (not failing): {history_text.describe(cp)}; {said}"
                      for cp, said in verdict.suspected],
            "change_point_head": ["change point", "metric", "commit", "size", "p-value",
                                  "steps ago"],
            "change_points": [[history_text.label(c), c.metric, c.commit[:10], f"{c.size:+.1%}",
                               c.pvalue, c.steps_ago]
                              for c in cps],
            "no_change_point": f"No change point (Otava, p < {drift.MAX_PVALUE:g}).",
            "plots": plots,
            "anchor_head": ["date", "commit", "metric", "new / anchor", "mark"],
            "anchors": [[e["date"][:10], e["new_commit"][:10], n, f"{m['ratio'] - 1:+.1%}",
                         m["mark"]]
                        for _, e in anchors for n, m in e["metrics"].items()
                        if m["mark"] != "not significant"],
            "level_head": ["metric", "level - 1", "95% interval", "steps"],
            "levels": [[n, f"{pts[-1].level - 1:+.1%}", _interval(pts[-1]), len(pts) - 1]
                       for n, pts in series.items()]}


def _stars(points: list[history.Point], anchors: list[tuple[int, dict]],
           name: str) -> list[tuple[int, float]]:
    """(step, level) of each A/B against the anchor that measured `name`: at the step of its
    commit."""
    step_of = {p.commit: k for k, p in enumerate(points)}
    return [(step_of[e["new_commit"]], e["metrics"][name]["ratio"]) for _, e in anchors
            if name in e["metrics"] and e["new_commit"] in step_of]


def _interval(p: history.Point) -> str:
    return (f"[{p.low - 1:+.1%}, {p.high - 1:+.1%}]" if p.low is not None and p.high is not None
            else "-")
