"""A multi-seed run's summary files: summary.csv (per cell, over its seeds), summary_seeds.csv (per cell and
seed) and summary.md; the aggregation is rlbench.analysis.seeds'."""
from __future__ import annotations

import pandas as pd
from rlbench.analysis.data import RunData
from rlbench.analysis.seeds import aggregate, per_seed, seed_frame, seeds_of
from rlbench.analysis.speedup import attribution, speedup_frame
from rlbench.reports.tables import attribution_text, to_markdown


def write_seed_summary(run: RunData) -> tuple[pd.DataFrame, pd.DataFrame, RunData]:
    """summary.csv (per cell, aggregated), summary_seeds.csv (per cell and seed), summary.md; returns
    (aggregated summary, aggregated speedups, the first seed's run for the per-cell plots)."""
    per = seed_frame(run)
    df = aggregate(per)
    sp_per = seed_frame(run, speedup_frame)
    sp = aggregate(sp_per, ["measured_speedup", "predicted_speedup"]) if len(sp_per) else speedup_frame(
        RunData(run.path, run.kind, run.name, run.reference, []))
    df.to_csv(run.path / "summary.csv", index=False)
    per.to_csv(run.path / "summary_seeds.csv", index=False)
    md = [f"# rlbench summary: {run.name} (seeds {', '.join(map(str, seeds_of(run)))})\n",
          "Median over seeds; `_seed_min`/`_seed_max`: the spread over seeds.\n", to_markdown(df),
          "\n## Per seed\n", to_markdown(per)]
    if len(sp):
        md += ["\n## Measured vs predicted periodic-async speedup (median over seeds)\n", to_markdown(sp)]
        md += ["\n## Where the speedup comes from\n"] + [f"- {t}" for t in attribution_text(attribution(sp))]
    (run.path / "summary.md").write_text("\n".join(md))
    subs = per_seed(run)
    first = next((s for s in subs.values() if s.cells), run)
    return df, sp, first
