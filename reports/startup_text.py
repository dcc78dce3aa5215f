"""The start-up table of `rlbench report --wide` (analysis/startup.py's rows as text)."""
from __future__ import annotations

from rlbench.analysis.startup import PHASES
from rlbench.reports.tables import fmt
from rlbench.reports.text_table import fit, wrap

NOTE = ("Start-up by phase, wall s (each phase as long as its slowest process; `first iteration`: "
        "from the cell process's start to its first iteration, less the first evaluation; "
        "`start-up`: to its first measured iteration, warm-up included; peak memory in MB; "
        "results.json lifecycle).")


def startup_lines(rows: list[dict]) -> list[str]:
    """The table (blank line and note first), or nothing when no cell recorded its phases."""
    if not rows:
        return []
    phases = [p for p in PHASES if any(p in r for r in rows)]
    head = ["cell", "weight file", *[p.replace("_", " ") for p in phases], "first iteration",
            "start-up",
            "driver MB", "largest worker MB"]
    body = [[r["cell"], r["weight_file"] or "–", *[fmt(r.get(p)) for p in phases],
             fmt(r["first_iteration_s"]),
             fmt(r["startup_s"]), fmt(r["peak_rss_mb"]),
             fmt(r["worker_peak_rss_mb"])] for r in rows]
    return [""] + wrap(NOTE) + fit(head, body)
