"""The families ladder in words and tables: the terminal's lines, families.csv and the report's section.

Renders what reports/families.py computed.
"""
from __future__ import annotations

import pandas as pd
from rlbench.reports.data import RunData
from rlbench.reports.families import families_frame, is_families, ladder
from rlbench.reports.html import esc, table
from rlbench.reports.tables import fmt

TITLE = "The families ladder: where the speedup comes from"
CSV = "families.csv"
SHOWN = ["cell", "TPSPD median (min–max)", "factor", "predicted", "error", "vs sync", "staleness 0/1/2…",
         "token staleness", "idle % per worker", "acc first→final", "status"]
NOTE = ("Each rung adds one thing to the rung above it, on the same devices and config: the factor is its "
        "TPSPD over that rung's (the ladder line multiplies the two staleness rungs into one factor). "
        "Predicted: from the sync cell's measured device costs alone (decode seconds by sequences in "
        "flight, refill and prefill seconds, seconds per trained token, optimizer step, weight sync), the "
        "async cells replayed on those costs; nothing fitted, nothing read from the async cells. Staleness: "
        "trained samples of the measured iterations by trained − behaviour version (a sample's behaviour "
        "version is its oldest token's); token staleness: the mean over response tokens (partial rollout "
        "makes later tokens fresher).")


def x(v) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}×"


def ladder_line(frame: pd.DataFrame, key: str = "factor") -> str:
    """'split 0.76× · overlap 1.39× · staleness 1.10× (k=1 1.05×, k=2 1.05×) · partial rollout 1.20× = 1.38×
    over sync'; key: "factor" (measured) or "predicted_factor"."""
    parts = []
    for name, total, steps in ladder(frame, key):
        inner = f" ({', '.join(f'{p} {x(v)}' for p, v in steps)})" if len(steps) > 1 else ""
        parts.append(f"{name} {x(total)}{inner}")
    last = frame.iloc[-1]["speedup" if key == "factor" else "predicted_speedup"]
    return " · ".join(parts) + f" = {x(last)} over {frame.iloc[0]['cell']}"


def _row(r: dict, stale_cols: list[str], idle_cols: list[str]) -> list[str]:
    tp = "–" if r["tpspd_median"] is None or r["tpspd_median"] != r["tpspd_median"] else \
        f"{fmt(r['tpspd_median'])} ({fmt(r['tpspd_min'])}–{fmt(r['tpspd_max'])})"
    err = "–" if r["error_pct"] is None or r["error_pct"] != r["error_pct"] else f"{r['error_pct']:+.0f}%"
    stale = "/".join(fmt(r[c]) for c in stale_cols)
    idle = ", ".join(f"{c[5:-4]} {r[c]:.0f}" for c in idle_cols if r[c] is not None and r[c] == r[c]) or "–"
    factor = "" if r["factor_name"] is None else f"{r['factor_name']} {x(r['factor'])}"
    pred = "" if r["factor_name"] is None else x(r["predicted_factor"])
    return [r["cell"], tp, factor, pred, err, x(r["speedup"]), stale, fmt(r["token_staleness_mean"]), idle,
            f"{fmt(r['accuracy_first'])}→{fmt(r['accuracy_final'])}", str(r["status"])]


def families_rows(frame: pd.DataFrame) -> list[list[str]]:
    stale = [c for c in frame.columns if c.startswith("stale_")]
    idle = [c for c in frame.columns if c.startswith("idle_") and c.endswith("_pct")]
    return [_row(r, stale, idle) for r in frame.astype(object).where(frame.notna(), None).to_dict("records")]


def families_lines(run: RunData) -> list[str]:
    """The terminal's ladder: the measured line, the predicted one, then one row per rung; [] for a run
    that is not a families ladder."""
    if not is_families(run):
        return []
    frame = families_frame(run)
    rows = [SHOWN] + families_rows(frame)
    widths = [max(len(r[i]) for r in rows) for i in range(len(SHOWN))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return ["", "Families ladder (families.csv):", f"  measured:  {ladder_line(frame)}",
            f"  predicted: {ladder_line(frame, 'predicted_factor')}", *lines]


def families_section(run: RunData) -> tuple[str, str] | None:
    """For a families run: write families.csv; -> (title, HTML body) for the report."""
    if not is_families(run):
        return None
    frame = families_frame(run)
    frame.to_csv(run.path / CSV, index=False)
    return TITLE, (f"<p><b>measured: {esc(ladder_line(frame))}</b></p>"
                   f"<p>predicted: {esc(ladder_line(frame, 'predicted_factor'))}</p>"
                   + table(families_rows(frame), SHOWN) + f"<p>{esc(NOTE)}</p>"
                   + "<details><summary>Every column (families.csv)</summary>"
                   + table([[None if v != v else v for v in r] for r in frame.itertuples(index=False)],
                           list(frame.columns)) + "</details>")
