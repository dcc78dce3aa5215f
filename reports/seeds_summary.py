"""A multi-seed run's summary files: summary.csv (per cell, over its seeds), summary_seeds.csv (per cell and
seed) and summary.md; the aggregation is rlbench.analysis.seeds'."""
from __future__ import annotations

import pandas as pd
from rlbench.analysis.data import RunData
from rlbench.analysis.seeds import aggregate, per_seed, seed_frame, seeds_of
from rlbench.analysis.speedup import speedup_frame
from rlbench.reports.tables import speedup_markdown, summary_lead


def seed_frames(run: RunData) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(summary per cell over its seeds, summary per cell and seed, speedups median over seeds)."""
    per = seed_frame(run)
    sp_per = seed_frame(run, speedup_frame)
    sp = aggregate(sp_per, ["measured_speedup", "predicted_speedup"]) if len(sp_per) else speedup_frame(
        RunData(run.path, run.kind, run.name, run.reference, []))
    return aggregate(per), per, sp


def write_seed_summary(run: RunData, df: pd.DataFrame, per: pd.DataFrame, sp: pd.DataFrame,
                       verdict: list[str]) -> RunData:
    """summary.csv (per cell, aggregated), summary_seeds.csv (per cell and seed), summary.md (opening with
    verdict, its markdown lines); returns the first seed's run, for the per-cell plots."""
    df.to_csv(run.path / "summary.csv", index=False)
    per.to_csv(run.path / "summary_seeds.csv", index=False)
    md = summary_lead(f"rlbench summary: {run.name} (seeds {', '.join(map(str, seeds_of(run)))})", df, verdict)
    md += ["Median over seeds; every seed's row: summary_seeds.csv."]
    md += speedup_markdown(sp, "Measured vs predicted periodic-async speedup (median over seeds)")
    (run.path / "summary.md").write_text("\n".join(md))
    subs = per_seed(run)
    return next((s for s in subs.values() if s.cells), run)
