"""The comparison table rendered: summary.csv and summary.md (the frames are rlbench.analysis.summary's and
.speedup's), the attribution in words, the terminal's compact columns and the cell formatting every table
shares.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from rlbench.analysis.data import RunData
from rlbench.analysis.regime import regime_frame
from rlbench.analysis.speedup import attribution, speedup_frame
from rlbench.analysis.summary import summary_frame
from rlbench.reports.regime_text import regime_lines
from rlbench.reports.utilisation import NOTE as UTIL_NOTE
from rlbench.reports.utilisation import peak_text, utilisation_frame


def attribution_text(rows: list[dict]) -> list[str]:
    """One sentence per attribution row, in words and numbers."""
    out = []
    for r in rows:
        def x(v):
            return "n/a" if _missing(v) else f"{v:.2f}×"
        share = "" if _missing(r["rollout_share_of_sync"]) else \
            f" (sync spends {100 * r['rollout_share_of_sync']:.0f}% of its iteration generating)"
        verdict = "wins" if (r["total_measured"] or 0) > 1.0 else "loses"
        out.append(f"{r['async']} vs {r['sync']}{share}: periodic asynchrony {verdict}, {x(r['total_measured'])} "
                   f"measured (predicted {x(r['total_predicted'])}) = device split alone {x(r['split_measured'])} "
                   f"(barrier cell {r['barrier']}; predicted {x(r['split_predicted'])}) × overlap "
                   f"{x(r['overlap_measured'])} (predicted {x(r['overlap_predicted'])}).")
    return out


COMPACT_HEAD = ["cell", "TPSPD median (min–max)", "speedup", "predicted", "rollout %", "rollout tok/s",
                "train tok/s", "weight sync s/iter", "host CPU % of a core", "idle % per worker", "acc before→after", "####-format %", "max stale", "status"]


def compact_rows(df: pd.DataFrame) -> list[list[str]]:
    """The headline columns (COMPACT_HEAD) of summary_frame rows, as text, for terminal and HTML."""
    idle_cols = [c for c in df.columns if c.startswith("idle_") and c.endswith("_pct")]
    return [_compact(r, idle_cols) for r in df.to_dict("records")]


def _compact(r: dict, idle_cols: list[str]) -> list[str]:
    tp = "–" if _missing(r["tpspd_median"]) else \
        f"{fmt(r['tpspd_median'])} ({fmt(r['tpspd_min'])}–{fmt(r['tpspd_max'])})"
    idle = ", ".join(f"{c[5:-4]} {r[c]:.0f}" for c in idle_cols if not _missing(r[c])) or "–"
    sp = "–" if _missing(r["speedup"]) else f"{r['speedup']:.2f}×"
    pred = "–" if _missing(r["predicted_speedup"]) else f"{r['predicted_speedup']:.2f}×"
    share = "–" if _missing(r["rollout_share"]) else f"{100 * r['rollout_share']:.0f}"
    acc = f"{fmt(r['accuracy_before'])}→{fmt(r['accuracy_after'])}"
    form = "–" if _missing(r["format_rate_before"]) or _missing(r["format_rate_after"]) else \
        f"{100 * r['format_rate_before']:.0f}→{100 * r['format_rate_after']:.0f}"
    host = "–" if _missing(r.get("host_cpu_pct")) else f"{r['host_cpu_pct']:.1f}"
    return [str(r["cell"]), tp, sp, pred, share, fmt(r["rollout_tok_s"]), fmt(r["train_tok_s"]), _weight_sync(r),
            host, idle, acc, form,
            fmt(r["staleness_max"]), str(r["status"])]


def _weight_sync(r: dict) -> str:
    """'0.0123 (vllm)': weight-sync seconds per iteration and the rollout backend that received them."""
    if _missing(r.get("weight_sync_s_per_iter")):
        return "–"
    backend = r.get("rollout_backend")
    return fmt(r["weight_sync_s_per_iter"]) + (f" ({backend})" if backend else "")


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt(v) -> str:
    """One table cell as text: '–' for missing, 4 significant digits, whole numbers from 1000."""
    if _missing(v):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table (no tabulate dependency)."""
    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v).replace("|", "\\|") for v in _values(row)) + " |"
            for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def _values(row) -> list:
    return [None if _missing(v) else v for v in row]


def write_summary(run: RunData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write summary.csv and summary.md into the run folder; returns (summary, speedups)."""
    df, sp = summary_frame(run), speedup_frame(run)
    df.to_csv(run.path / "summary.csv", index=False)
    md = [f"# rlbench summary: {run.name}\n", to_markdown(df)]
    if len(sp):
        md += ["\n## Measured vs predicted periodic-async speedup (TPSPD ratio)\n", to_markdown(sp)]
        md += ["\n## Where the speedup comes from\n"] + [f"- {t}" for t in attribution_text(attribution(sp))]
    regime = regime_lines(regime_frame(run, sp))
    if regime:
        md += ["\n## Where periodic asynchrony pays: the regime map\n"] + [f"- {t}" for t in regime]
    util = utilisation_frame(run)
    if len(util):
        util.to_csv(run.path / "utilisation.csv", index=False)
        md += ["\n## Hardware utilisation per stage\n", to_markdown(util), peak_text(run), "", UTIL_NOTE]
    (run.path / "summary.md").write_text("\n".join(md))
    return df, sp
