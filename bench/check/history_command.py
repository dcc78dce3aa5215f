"""`rlbench history FILE [--html PAGE]`: what the history of accepted A/B results says (bench/check/history.py,
bench/check/drift.py), as text and, with --html, as a page (reports/history_html.py). Exit 1 on a drift
that `rlbench check --record` would fail, 2 on a corrupt or foreign file."""
from __future__ import annotations

from pathlib import Path

import typer
from rlbench.check import drift, history


def history_command(path: Path, html: Path | None, last_n: int) -> int:
    entries = history.read(path)
    if not entries and not Path(path).exists():
        typer.echo(f"{path}: no history yet (`rlbench check --record {path}` starts it)")
        return 0
    typer.echo(drift.format_history(entries, path, last_n))
    workloads = list({drift._key(e["workload"]): e["workload"] for e in entries}.values())
    code = 0
    for wl in workloads:
        verdict = drift.judge(entries, wl, last_n)
        if verdict.failures:
            typer.echo(drift.format_drift(verdict, path, history.anchor_of(entries, wl)[0]))
            code = 1
    if html is not None:
        from rlbench.reports.history_html import write_history_html

        typer.echo(f"history page: {write_history_html(entries, path, html, last_n)}")
    return code

