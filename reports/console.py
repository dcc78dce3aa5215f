"""summary_table_text: a compact plain-text table of a run for the terminal (no colour, no rich)."""
from __future__ import annotations

from rlbench.reports.data import load
from rlbench.reports.tables import COMPACT_HEAD, compact_rows, summary_frame


def summary_table_text(run_dir) -> str:
    """cell | TPSPD median (min–max) | speedup vs reference | rollout/train tokens/s | idle % per
    worker | pass@1 before→after | max staleness | status, as aligned plain text (TPSPD in
    tokens/s/device)."""
    rows = [COMPACT_HEAD] + compact_rows(summary_frame(load(run_dir)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(COMPACT_HEAD))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
