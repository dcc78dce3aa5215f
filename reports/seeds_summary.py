"""A multi-seed run's summary.md (its CSVs and the aggregation over seeds:
rlbench.analysis.seeds)."""
from __future__ import annotations

import pandas as pd
from rlbench.analysis.data import RunData
from rlbench.analysis.seeds import seeds_of
from rlbench.reports.tables import speedup_markdown, summary_lead


def write_seed_summary_md(run: RunData, df: pd.DataFrame, sp: pd.DataFrame,
                          verdict: list[str]) -> None:
    """summary.md of a multi-seed run, opening with verdict (its markdown lines). df, sp: the
    summary per cell and the speedups, each over the seeds (rlbench.analysis.seeds.seed_frames)."""
    md = summary_lead(f"rlbench summary: {run.name} (seeds {', '.join(map(str, seeds_of(run)))})",
                      df, verdict)
    md += ["Median over seeds; every seed's row: summary_seeds.csv."]
    md += speedup_markdown(sp, "Measured vs predicted periodic-async speedup (median over seeds)")
    (run.path / "summary.md").write_text("\n".join(md))
