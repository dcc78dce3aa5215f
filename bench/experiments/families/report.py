"""The families ladder in words and tables, from families.csv (computed by analysis.py): the
terminal's lines, the report's section, summary tables for `--markdown` and the verdict's sentence
(REPORT is what the record names).

The ladder line groups the rungs' factors by their `ladder_factor` (the two staleness rungs form one
factor, shown with its two steps in brackets); a group's factor is the product of its rungs'.
"""
from __future__ import annotations

import math

import pandas as pd
from rlbench.analysis.data import RunData, read_table
from rlbench.analysis.intervals import described, from_columns
from rlbench.core.experiments.spec import Report
from rlbench.experiments.families.analysis import LadderAnswer, ladder_frame
from rlbench.reports.html import esc, table
from rlbench.reports.tables import fmt, markdown_table
from rlbench.reports.text_table import wrap

TITLE = "The families ladder: where the speedup comes from"
CSV = "families.csv"  # written by analysis.py
SHOWN = ["cell", "TPSPD median (min–max)", "factor", "predicted", "error", "vs sync (95% interval)",
         "staleness 0/1/2…",
         "token staleness", "idle % per worker", "acc first→final", "status"]
NOTE = ("Each rung adds one thing to the rung above it, on the same devices and config: the factor "
        "is its TPSPD over that rung's (the ladder line multiplies the two staleness rungs into "
        "one factor). Predicted: from the sync cell's measured device costs alone (decode seconds "
        "by sequences in flight, refill and prefill seconds, seconds per trained token, optimizer "
        "step, weight sync), the async cells replayed on those costs; nothing fitted, nothing read "
        "from the async cells. Staleness: trained samples of the measured iterations by trained − "
        "behaviour version (a sample's behaviour version is its oldest token's); token staleness: "
        "the mean over response tokens (partial rollout makes later tokens fresher). Idle: share "
        "of the measured span a worker ran no work stage. vs sync: the rung's TPSPD over sync's, "
        "with its 95% interval from the per-iteration ratios and what that interval says (wins or "
        "loses only where it excludes 1: docs/metrics.md, 'Verdicts').")


def read(run: RunData) -> pd.DataFrame | None:
    """families.csv of the run folder (None where there is none: not a families ladder)."""
    return read_table(run.path / CSV)


def x(v) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}×"


def ladder(frame: pd.DataFrame, key: str = "factor") -> list[tuple[str, float | None, list]]:
    """[(line factor, product of its rungs' factors or None, [(rung factor name, value), ...])] in
    ladder order; key: "factor" (measured) or "predicted_factor"."""
    groups: dict[str, list] = {}
    for r in frame.to_dict("records"):
        if r["ladder_factor"]:
            groups.setdefault(r["ladder_factor"], []).append((r["factor_name"], r[key]))
    return [(name, None if any(v is None for _, v in steps) else math.prod(v for _, v in steps),
             steps)
            for name, steps in groups.items()]


def ladder_line(frame: pd.DataFrame, key: str = "factor") -> str:
    """'split 0.76× · overlap 1.39× · staleness 1.10× (k=1 1.05×, k=2 1.05×) · partial rollout 1.20×
    = 1.40× over sync'; key: "factor" (measured) or "predicted_factor"."""
    parts = []
    for name, total, steps in ladder(frame, key):
        inner = f" ({', '.join(f'{p} {x(v)}' for p, v in steps)})" if len(steps) > 1 else ""
        parts.append(f"{name} {x(total)}{inner}")
    last = frame.iloc[-1]["speedup" if key == "factor" else "predicted_speedup"]
    return " · ".join(parts) + f" = {x(last)} over {frame.iloc[0]['cell']}"


def _row(r: dict, stale_cols: list[str], idle_cols: list[str]) -> list[str]:
    tp = "–" if r["tpspd_median"] is None else \
        f"{fmt(r['tpspd_median'])} ({fmt(r['tpspd_min'])}–{fmt(r['tpspd_max'])})"
    err = "–" if r["error_pct"] is None else f"{r['error_pct']:+.0f}%"
    idle = ", ".join(f"{c[5:-4]} {r[c]:.0f}" for c in idle_cols if r[c] is not None) or "–"
    factor = "" if r["factor_name"] is None else f"{r['factor_name']} {x(r['factor'])}"
    pred = "" if r["factor_name"] is None else x(r["predicted_factor"])
    return [r["cell"], tp, factor, pred, err, _vs_sync(r), "/".join(fmt(r[c]) for c in stale_cols),
            fmt(r["token_staleness_mean"]), idle,
            f"{fmt(r['accuracy_first'])}→{fmt(r['accuracy_final'])}",
            str(r["status"])]


def _vs_sync(r: dict) -> str:
    """'1.04× (0.98–1.10, even)'; the first rung (sync itself) just its 1.00×."""
    ratio = from_columns(r, "speedup", "speedup")
    if r["factor_name"] is None or ratio.value is None:
        return x(r["speedup"])
    bounds = "" if ratio.low is None else f"{ratio.low:.2f}–{ratio.high:.2f}, "
    return f"{x(ratio.value)} ({bounds}{ratio.outcome})"


def families_rows(frame: pd.DataFrame) -> list[list[str]]:
    stale = [c for c in frame.columns if c.startswith("stale_")]
    idle = [c for c in frame.columns if c.startswith("idle_") and c.endswith("_pct")]
    return [_row(r, stale, idle) for r in frame.to_dict("records")]


def families_lines(run: RunData) -> list[str]:
    """The terminal's ladder: the measured line, the predicted one, then one row per rung; []
    without families.csv."""
    frame = read(run)
    if frame is None:
        return []
    rows = [SHOWN] + families_rows(frame)
    widths = [max(len(r[i]) for r in rows) for i in range(len(SHOWN))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return ["", f"Families ladder ({CSV}):", f"  measured:  {ladder_line(frame)}",
            f"  predicted: {ladder_line(frame, 'predicted_factor')}", *lines]


def families_brief(run: RunData) -> list[str]:
    """The default terminal's ladder: the measured and the predicted line, wrapped; [] without
    families.csv."""
    frame = read(run)
    if frame is None:
        return []
    return (["", f"Families ladder ({CSV}):"] + wrap(f"measured: {ladder_line(frame)}", indent="  ")
            + wrap(f"predicted: {ladder_line(frame, 'predicted_factor')}", indent="  "))


def families_section(run: RunData) -> tuple[str, str] | None:
    """(title, HTML body) for the report; None without families.csv."""
    frame = read(run)
    if frame is None:
        return None
    return TITLE, (f"<p><b>measured: {esc(ladder_line(frame))}</b></p><p>predicted: "
                   f"{esc(ladder_line(frame, 'predicted_factor'))}</p>"
                   + table(families_rows(frame), SHOWN) + f"<p>{esc(NOTE)}</p>"
                   + "<details><summary>Every column (families.csv)</summary>"
                   + table([list(r) for r in frame.itertuples(index=False)],
                           list(frame.columns)) + "</details>")


def markdown_lines(run: RunData, sp=None) -> list[str]:
    """`rlbench report --markdown`'s section: both ladder lines, then the rungs' table."""
    ladder = ladder_frame(run)
    if ladder is None:
        return []
    ladder = ladder.astype(object).where(ladder.notna(), None)
    return ["", "### Families ladder", "", f"- measured: {ladder_line(ladder)}",
            f"- predicted: {ladder_line(ladder, 'predicted_factor')}", "",
            markdown_table(SHOWN, families_rows(ladder))]


def ladder_sentence(a: LadderAnswer) -> str | None:
    """The first rung of the families ladder that pays by its interval, or the best rung where none
    does."""
    best = a.best
    if best is None:
        return None
    if a.first_paying is None:
        return (f"No rung of the families ladder pays here by its interval: the best, {best.cell} "
                f"({best.adds}), reaches {x(best.speedup)} sync's TPSPD "
                f"({described(best.interval)}; predicted {x(best.predicted)}): {best.outcome}.")
    r = a.first_paying
    more = "" if best.cell == r.cell else f"; the best, {best.cell}, {x(best.speedup)}"
    return (f"On the families ladder it pays from {r.cell} on ({r.adds}): {x(r.speedup)} sync's "
            f"TPSPD ({described(r.interval)}; predicted {x(r.predicted)}){more}.")


def html_section(run: RunData, sp=None) -> tuple[str, str] | None:
    return families_section(run)


def wide_lines(run: RunData, sp=None) -> list[str]:
    return families_lines(run)


REPORT = Report(html=html_section, brief=families_brief, wide=wide_lines, markdown=markdown_lines,
                change=ladder_sentence)
