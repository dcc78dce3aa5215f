"""The comparison table rendered: summary.md (the frames, and summary.csv beside it, are
rlbench.analysis.summary's and .speedup's), the attribution in words, the terminal's compact columns
and the cell formatting every table shares.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from rlbench.analysis.data import RunData
from rlbench.analysis.speedup import attribution
from rlbench.analysis.intervals import described
from rlbench.analysis.utilisation import utilisation_frame
from rlbench.reports.utilisation import NOTE as UTIL_NOTE
from rlbench.reports.utilisation import peak_text

IN_WORDS = {"wins": "wins", "loses": "loses", "even": "is even",
            "too few": "is not called (too few iterations)",
            # "periodic asynchrony ...", by the interval
            "not called": "is not called (the cells ran one after another)"}


def attribution_text(rows: list[dict]) -> list[str]:
    """One sentence per attribution row, in words and numbers."""
    out = []
    for r in rows:
        def x(v):
            return "n/a" if _missing(v) else f"{v:.2f}×"
        share = "" if _missing(r["rollout_share_of_sync"]) else \
            f" (sync spends {100 * r['rollout_share_of_sync']:.0f}% of its iteration generating)"
        verdict = IN_WORDS.get(r["total"].outcome, "is not measured")
        out.append(f"{r['async']} vs {r['sync']}{share}: periodic asynchrony {verdict}, "
                   f"{x(r['total_measured'])} measured ({described(r['total'])}; predicted "
                   f"{x(r['total_predicted'])}) = device split alone {x(r['split_measured'])} "
                   f"(barrier cell {r['barrier']}; predicted {x(r['split_predicted'])}) × overlap "
                   f"{x(r['overlap_measured'])} (predicted {x(r['overlap_predicted'])}).")
    return out


BUSY_NOTE = ("Each stage's device busy time over its wall time, measured iterations, summed over "
             "the workers that ran it: on CUDA the share of NVML's utilisation samples in which a "
             "kernel ran (the whole GPU's), on CPU the worker thread's CPU seconds "
             "(docs/metrics.md, 'Device busy time').")

COMPACT_HEAD = ["cell", "TPSPD median (min–max)", "speedup", "predicted", "rollout %",
                "rollout tok/s",
                "train tok/s", "weight sync s/iter", "host CPU % of a core", "idle % per worker",
                "busy % per stage", "acc before→after", "####-format %", "max stale", "status"]


# The key columns: what the terminal and summary.md show by default (every column: --wide,
# summary.csv)
KEY = ["cell", "TPSPD median (min–max)", "speedup", "predicted", "rollout %", "acc before→after"]
STATUS = "status"  # a column of the key table only where a cell did not complete


def key_table(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(head, rows) of the key columns of summary_frame rows, as text; the status column where any
    cell is not complete."""
    rows = compact_rows(df)
    cols = [COMPACT_HEAD.index(h) for h in KEY]
    if any(r[-1] != "complete" for r in rows):
        cols.append(COMPACT_HEAD.index(STATUS))
    return [COMPACT_HEAD[i] for i in cols], [[r[i] for i in cols] for r in rows]


def compact_rows(df: pd.DataFrame) -> list[list[str]]:
    """The headline columns (COMPACT_HEAD) of summary_frame rows, as text, for terminal and HTML."""
    idle_cols = [c for c in df.columns if c.startswith("idle_") and c.endswith("_pct")]
    return [_compact(r, idle_cols) for r in df.to_dict("records")]


def _busy(r: dict) -> str:
    """'GPU: rollout 12, update 31': each stage's device busy % (analysis/busy.py), '–' without."""
    cols = [c for c in r if c.startswith("busy_") and c.endswith("_pct") and not _missing(r[c])]
    if not cols:
        return "–"
    return f"{r.get('busy_clock') or '?'}: " + ", ".join(f"{c[5:-4]} {r[c]:.0f}" for c in cols)


def busy_markdown(df: pd.DataFrame) -> list[str]:
    """summary.md's busy table: one row per cell, one column per stage ("GPU busy %" on CUDA, "CPU
    busy %" on CPU: the clock column says which); [] where no cell measured it."""
    cols = [c for c in df.columns if c.startswith("busy_") and c.endswith("_pct")]
    if not cols:
        return []
    head = ["cell", "busy %"] + [c[5:-4] for c in cols]
    rows = [[str(r["cell"]), f"{r.get('busy_clock') or '–'} busy %"] +
            ["–" if _missing(r[c]) else f"{r[c]:.0f}" for c in cols] for r in df.to_dict("records")]
    return ["\n## Device busy per stage\n", markdown_table(head, rows), "", BUSY_NOTE]


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
    return [str(r["cell"]), tp, sp, pred, share, fmt(r["rollout_tok_s"]), fmt(r["train_tok_s"]),
            _weight_sync(r),
            host, idle, _busy(r), acc, form,
            fmt(r["staleness_max"]), str(r["status"])]


def _weight_sync(r: dict) -> str:
    """'0.0123 (vllm)': weight-sync seconds per iteration and the rollout backend that received
    them."""
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


SPEEDUP_HEAD = ["cell", "predicted from", "rollout share of sync", "measured speedup",
                "predicted speedup",
                "error"]


def speedup_rows(sp: pd.DataFrame) -> list[list[str]]:
    """speedup_frame rows as SPEEDUP_HEAD's text (every column: the report's details, summary.csv's
    siblings)."""
    out = []
    for r in sp.to_dict("records"):
        share, err = r["rollout_share_of_sync"], r["error_pct"]
        out.append([str(r["cell"]), str(r["predicted_from"]),
                    "–" if _missing(share) else f"{100 * share:.0f}%",
                    _x(r["measured_speedup"]), _x(r["predicted_speedup"]),
                    "–" if _missing(err) else f"{err:+.0f}%"])
    return out


def _x(v) -> str:
    return "–" if _missing(v) else f"{v:.2f}×"


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured markdown table of text cells ('|' escaped)."""
    def line(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(head), "|" + "|".join("---" for _ in head) + "|", *map(line, rows)])


def summary_lead(title: str, df: pd.DataFrame, verdict: list[str]) -> list[str]:
    """summary.md's opening: the title, the verdict (markdown bullets), the key columns (at most 8),
    and where every column is."""
    head, rows = key_table(df)
    return [f"# {title}\n", "## Verdict\n", *verdict, "", "## Key columns\n",
            markdown_table(head, rows), "",
            "Every column of every cell: summary.csv, beside this file. What each column means: "
            "report.html or `rlbench report --help`."]


def speedup_markdown(sp: pd.DataFrame, title: str) -> list[str]:
    if not len(sp):
        return []
    why = attribution_text(attribution(sp))
    return [f"\n## {title}\n", markdown_table(SPEEDUP_HEAD, speedup_rows(sp))] + \
        (["\n## Where the speedup comes from\n"] + [f"- {t}" for t in why] if why else [])


def write_summary_md(run: RunData, df: pd.DataFrame, sp: pd.DataFrame, verdict: list[str],
                     sections: list[str] = ()) -> None:
    """Write summary.md into the run folder. df, sp: summary_frame(run), speedup_frame(run);
    verdict: the verdict's markdown lines (reports/verdict_text.py), which open summary.md;
    sections: the experiments' lines after the speedups (reports/build.py reads them from their
    records)."""
    md = summary_lead(f"rlbench summary: {run.name}", df, verdict)
    md += speedup_markdown(sp, "Measured vs predicted periodic-async speedup (TPSPD ratio)")
    md += list(sections)
    md += busy_markdown(df)
    util = utilisation_frame(run)
    if len(util):
        md += ["\n## Hardware utilisation per stage\n", to_markdown(util), peak_text(run), "",
               UTIL_NOTE]
    (run.path / "summary.md").write_text("\n".join(md))
