"""summary_table_text: a compact plain-text table of a run for the terminal (no colour, no rich)."""
from __future__ import annotations

from rlbench.reports.accuracy_html import accuracy_text
from rlbench.analysis.accuracy_table import accuracy_frame
from rlbench.analysis.data import load
from rlbench.reports.families_text import families_lines
from rlbench.reports.peers_text import peers_lines
from rlbench.analysis.regime import regime_frame
from rlbench.reports.regime_text import regime_lines
from rlbench.analysis.seeds import cell_summary, is_multi_seed
from rlbench.analysis.speedup import attribution, speedup_frame
from rlbench.reports.tables import COMPACT_HEAD, attribution_text, compact_rows


def summary_table_text(run_dir, add=()) -> str:
    """cell | TPSPD median (min–max) | speedup vs reference | rollout/train tokens/s | idle % per
    worker | pass@1 before→after | max staleness | status, as aligned plain text (TPSPD in
    tokens/s/device); a multi-seed run shows the median over seeds. Then the time-to-accuracy table.
    add: other run folders whose cells join the table (reports/data.merge)."""
    run = load(run_dir, add)
    multi = is_multi_seed(run)
    df, sp = cell_summary(run), cell_summary(run, speedup_frame, [])
    rows = [COMPACT_HEAD] + compact_rows(df)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COMPACT_HEAD))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if multi:
        lines.append("median over seeds; per seed: summary_seeds.csv")
    lines += ["", "rollout %: share of a sync iteration spent generating; predicted: from the sync cell's "
              "measured device costs (bench/core/costmodel/predict.py)."]
    regime = [] if multi else regime_lines(regime_frame(run, sp))
    # a regime map: one sentence per point (its attribution included), then where periodic asynchrony pays
    lines += ["Regime map (regime.csv, plots/regime.png):"] + regime if regime else attribution_text(attribution(sp))
    lines += families_lines(run)  # families.csv (bench/analysis/ladder.py), where the run is a families ladder
    lines += peers_lines(run)  # peers.csv (bench/analysis/peers.py), where the run has a peer framework's cell
    return "\n".join(lines + accuracy_text(accuracy_frame(run)))
