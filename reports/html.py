"""report.html: one self-contained file (inline CSS, plots as base64 data URIs, no URL, no script).

Sections: the verdict, then (where the run has one) the regime map, families ladder or peer
framework, the summary (the key columns; the other headline columns and every metric below them),
measured vs predicted speedup with the model, utilisation, accuracy, plots, and per cell its status,
provenance and resolved config (collapsible). Every table fits a 1200-pixel page: a wider one is
split into tables that each repeat its first column (reports/text_table.py column_groups), never
scrolled sideways.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import json
from pathlib import Path

import numpy as np
import pandas as pd
from rlbench.core.costmodel import predict
from rlbench.analysis.data import CellData, RunData
from rlbench.analysis.speedup import attribution
from rlbench.reports.glossary import definitions
from rlbench.reports.tables import (COMPACT_HEAD, KEY, SPEEDUP_HEAD, attribution_text, compact_rows,
                                    fmt, key_table, speedup_rows)
from rlbench.reports.text_table import column_groups
from rlbench.analysis.utilisation import utilisation_frame
from rlbench.reports.utilisation import NOTE as UTIL_NOTE
from rlbench.reports.utilisation import peak_text

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1200px;color:#222;line-height:1.4;padding:0 16px}
h1{font-size:1.6em;margin-bottom:0}
h2{border-bottom:2px solid #4C72B0;padding-bottom:2px;margin-top:1.6em}
.meta{color:#666;margin-top:4px}
.verdict{font-size:1.1em;background:#eef2f8;border-left:4px solid #4C72B0;padding:2px 12px}
.defs{font-size:13px;color:#444;padding-left:18px}.defs li{margin:2px 0}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;white-space:nowrap}
th{white-space:normal;vertical-align:bottom}
td.w{white-space:normal;overflow-wrap:anywhere;min-width:24em}
td.n{text-align:right;font-variant-numeric:tabular-nums}thead th{background:#eef2f8}
tr:nth-child(even) td{background:#fafafa}
figure{margin:16px 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{color:#555;font-size:13px}
details{margin:6px 0}summary{cursor:pointer;color:#4C72B0}
pre{background:#f6f6f6;padding:8px;font-size:12px;overflow-x:auto}
.warn{background:#fff4e5;border-left:4px solid #DD8452;padding:4px 8px}
.ok{color:#2f7d32}.bad{color:#b3261e}
"""

# what the papers report (docs/peers.md, 'Published figures'), beside what this run measured
LITERATURE = [
    ("Periodic Asynchrony", "7B, NPU, vs synchronous", "TPSPD 61.641 → 192.259 (≈3.1×)"),
    ("Periodic Asynchrony", "GSM8K, NVIDIA A100", "3.09× over VERL"),
    ("Periodic Asynchrony", "asynchrony alone", "≈2×, closely matching theoretical predictions"),
    ("AsyncFlow", "Qwen2.5-7B/32B, 32–1024 NPUs, vs verl", "1.59× average, 2.03× peak"),
    ("VERL one-step-off", "end-to-end", "+23% (FSDP2), +40% (Megatron)"),
]

CAPTIONS = {
    "TPSPD per cell": "Tokens per second per device (prompt + response tokens / wall time / all "
                      "devices), median over measured iterations; error bars min–max.",
    "Measured vs predicted speedup": "TPSPD ratio over the sync reference; predictions from the "
                                     "sync run's stage times for the async cell's device split.",
    "Stage-time breakdown": "Mean seconds per measured iteration in each stage, summed over "
                            "workers (so overlapping workers can exceed the wall time, shown as "
                            "◆).",
    "Timeline of worker stages": "Every worker's stage events over up to 3 measured iterations; "
                                 "gaps are idle time, hatched bars are queue waits.",
    "Reward and accuracy": "Training reward mean per iteration and greedy pass@1 on the eval set.",
    "Staleness": "trained_version − behaviour_version per trained sample.",
}


def esc(v) -> str:
    """HTML-escaped text; '://' is defanged so that no URL appears anywhere in the file."""
    return html.escape(fmt(v) if not isinstance(v, str) else v).replace("://", ":&#47;&#47;")


# characters of 13-pixel table text across the page's 1200 pixels, padding included
PAGE_CHARS = 150
# a cell longer than this wraps (a JSON value, a sentence) instead of widening its column
LONG_TEXT = 60


def table(rows: list[list], head: list) -> str:
    """A plain HTML table from rows of values (formatted with tables.fmt); one wider than the page
    is split into tables of consecutive columns, each led by the first column."""
    widths = [max([_chars(head[i],
                          head=True)] + [_chars(r[i]) for r in rows]) for i in range(len(head))]
    return "".join(_table([[r[i] for i in g] for r in rows], [head[i] for i in g])
                   for g in column_groups(widths, PAGE_CHARS, gap=3))


def _table(rows: list[list], head: list) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td{_cls(v)}>{esc(v)}</td>" for v in r) + "</tr>" for r
                   in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _chars(v, head: bool = False) -> int:
    """The width a value takes in its column, in characters: a head wraps at its spaces, long text
    wraps."""
    text = fmt(v) if not isinstance(v, str) else v
    if head:
        return max((len(w) for w in text.split()), default=0)
    return min(len(text), LONG_TEXT // 2) if len(text) > LONG_TEXT else len(text)


def _cls(v) -> str:
    """Numbers right-aligned, text left-aligned, long text wrapped."""
    numeric = isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))
    long = isinstance(v, str) and len(v) > LONG_TEXT
    return ' class="n"' if numeric else ' class="w"' if long else ""


def summary_html(df: pd.DataFrame) -> str:
    """The key columns (one row per cell), the other headline columns, then every summary.csv column
    with metrics as rows and cells as columns, collapsible; then what each column means."""
    if not len(df):
        return "<p>No cell has results yet.</p>"
    head, rows = key_table(df)
    rest = [0] + [i for i, h in enumerate(COMPACT_HEAD) if h not in KEY]
    compact = compact_rows(df)
    cols = [c for c in df.columns if c != "cell"]
    metrics = [[c] + [_clean(v) for v in df[c]] for c in cols]
    return (table(rows, head)
            + "<details open><summary>More headline columns</summary>"
            + table([[r[i] for i in rest] for r in compact],
                    [COMPACT_HEAD[i] for i in rest]) + "</details>"
            + "<details><summary>All metrics (the columns of summary.csv)</summary>"
            + table(metrics, ["metric"] + list(df["cell"])) + "</details>"
            + '<ul class="defs">' + "".join(f"<li>{esc(d)}</li>" for d in definitions()) + "</ul>")


def _clean(v):
    return None if isinstance(v, float) and v != v else v


def speedup_html(sp: pd.DataFrame) -> str:
    if not len(sp):
        return ("<p>No prediction: it needs a sync cell with measured iterations and a "
                "periodic_async cell to compare with.</p>")
    rows = [[_clean(v) for v in r] for r in sp.itertuples(index=False)]
    every = ("<details><summary>Every column (the contention term beside the model)</summary>"
             + table(rows, list(sp.columns)) + "</details>")
    text = ("<p>Measured speedup = the typical per-iteration TPSPD ratio of the async cell over "
            "its reference (exp of the 20%-trimmed mean of the paired log-ratios), the centre of "
            "its 95% interval; the ratio of medians where the iterations are too few for an "
            "interval. Predicted: from the sync cell's own measured device costs (a decode step's "
            "seconds by its batch bucket and cache window, seconds per trained token, optimizer "
            "step, weight sync), replaying the measured response lengths through the async layout "
            "step by step, each iteration's predicted TPSPD paired with the reference's as the "
            "measured speedup pairs them. A barrier cell (overlap = false) has the async processes "
            "and devices but trains only after the last group has arrived.</p>")
    why = attribution_text(attribution(sp))
    why_html = ("<h3>Where the speedup comes from</h3><ul>"
                + "".join(f"<li>{esc(t)}</li>" for t in why)
                + "</ul>") if why else ""
    model = (f"<details><summary>Prediction "
             f"model</summary><pre>{esc(predict.__doc__.strip())}</pre></details>")
    return table(speedup_rows(sp), SPEEDUP_HEAD) + every + text + why_html + model


def plot_html(plots: dict[str, Path]) -> str:
    out = []
    for title, path in plots.items():
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
        out.append(f'<figure><img alt="{esc(title)}" src="data:image/png;base64,{data}">'
                   f"<figcaption><b>{esc(title)}.</b> "
                   f"{esc(CAPTIONS.get(title, ''))}</figcaption></figure>")
    return "\n".join(out)


def cell_html(c: CellData) -> str:
    """Status (with the error, if any), provenance and the resolved config of one cell."""
    r = c.result
    cls = "ok" if c.status == "complete" else "bad"
    parts = [f'<h3>{esc(c.name)}</h3><p>status: <span class="{cls}">{esc(c.status)}</span>, '
             f"{len(c.iterations)} iterations recorded, {len(c.events)} stage events, "
             f"{len(c.samples)} samples, total wall {esc(r.get('wall_s_total'))} s</p>"]
    if r.get("error"):
        parts.append(f'<p class="warn">error: {esc(r["error"])}</p>')
    prov = r.get("provenance") or {}
    rows = [[k, v if not isinstance(v, (dict, list)) else json.dumps(v, sort_keys=True)]
            for k, v in prov.items()]
    parts.append("<details><summary>Provenance</summary>" + (table(rows, ["key", "value"]) if rows
                 else "<p>none recorded</p>") + "</details>")
    config = json.dumps(r.get("config") or {}, indent=2, sort_keys=False)
    parts.append(f"<details><summary>Resolved config</summary><pre>{esc(config)}</pre></details>")
    return "\n".join(parts)


def utilisation_html(run: RunData) -> str:
    """MFU and bandwidth utilisation per cell and stage (analysis/utilisation.py), with the peak
    used."""
    df = utilisation_frame(run)
    if not len(df):
        return "<p>no utilisation recorded (cells without work counts or peak)</p>"
    rows = [list(r) for r in df.itertuples(index=False)]
    return table(rows, list(df.columns)) + f"<p>{esc(peak_text(run))}. {esc(UTIL_NOTE)}</p>"


def render(run: RunData, df: pd.DataFrame, sp: pd.DataFrame, plots: dict[str, Path],
           sections: list[tuple[str, str]] = (), headline: tuple[str, str] | None = None,
           verdict: str = "") -> str:
    """The whole document as one string; verdict: its HTML (reports/verdict_text.py), the first
    section; headline: (title, HTML body) next (the regime map, families ladder or peer framework,
    where the run has one); sections: (title, HTML body) after the speedup section."""
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    warn = [f'<p class="warn">cell {esc(c.name)}: {esc(c.status)} after {len(c.iterations)} '
            f"iterations</p>" for c in run.cells if c.status != "complete"]
    warn += [f'<p class="warn">cell {esc(m)}: no results.json (not run)</p>' for m in run.missing]
    body = [f"<h1>rlbench report: {esc(run.name)}</h1>",
            f'<p class="meta">{esc(run.kind)} folder {esc(run.path.name)}; {len(run.cells)} '
            f'cell(s); '
            f"reference cell {esc(run.reference)}; report written {esc(created)}</p>", *warn,
            *([f'<h2 id="verdict">Verdict</h2>{verdict}'] if verdict else []),
            *([f"<h2>{esc(headline[0])}</h2>{headline[1]}"] if headline else []),
            "<h2>Summary</h2>", summary_html(df),
            "<h2>Periodic-async speedup: measured vs predicted</h2>", speedup_html(sp),
            "<h2>Hardware utilisation per stage</h2>", utilisation_html(run),
            *[f"<h2>{esc(title)}</h2>{body}" for title, body in sections],
            "<h2>Plots</h2>", plot_html(plots),
            "<h2>Cells</h2>", *[cell_html(c) for c in run.cells],
            "<h2>Reference figures from the literature</h2>",
            table([list(r) for r in LITERATURE], ["source", "setting", "figure"])]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>rlbench report: {esc(run.name)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_html(run: RunData, df: pd.DataFrame, sp: pd.DataFrame, plots: dict[str, Path],
               sections: list[tuple[str, str]] = (), headline: tuple[str, str] | None = None,
               verdict: str = "") -> Path:
    return write_page(render(run, df, sp, plots, sections, headline, verdict),
                      run.path / "report.html")


def write_page(html: str, out: Path) -> Path:
    """Write a page to `out` (its folder made), atomically: a reader never sees half a page; -> its
    path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return out
