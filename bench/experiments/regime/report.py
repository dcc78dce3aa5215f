"""The regime map's place in a report: regime.csv, plots/regime.png and the section at the top of
report.html, its sentences in the terminal (--wide), summary.md and `--markdown`, and the verdict's
sentence on where it pays (analysis.py computes, text.py and plot.py render; REPORT is what the
record names)."""
from __future__ import annotations

import pandas as pd
from rlbench.analysis.data import RunData
from rlbench.analysis.seeds import is_multi_seed
from rlbench.core.experiments.spec import Report
from rlbench.experiments.regime.analysis import length_frame, regime_frame, verdict
from rlbench.experiments.regime.plot import plot_lengths, plot_map, tail_label
from rlbench.experiments.regime.text import regime_lines, regime_sentence
from rlbench.reports.html import esc, plot_html, table
from rlbench.reports.tables import fmt, markdown_table

TITLE = "Where periodic asynchrony pays: the regime map"
CAPTION = ("Left: periodic-async / sync TPSPD per point against the sync-cell statistic that "
           "separates wins from losses best (filled: measured, bars min–max of the per-iteration "
           "ratio; hollow: predicted from the sync cell alone), the 1.0 line and the crossovers. "
           "Right: the grid, coloured by the measured speedup.")
LENGTHS = ["tail", "points", "samples", "mean", "p50", "p90", "p99", "max", "max_over_mean",
           "cut_share"]
LENGTH_CAPTION = ("Response lengths each tail produced in the sync cells' measured iterations (the "
                  "barrier and async cells of a point generate the same ones): drawn lognormal "
                  "tails and, where a run was added, a model's own EOS-ended ones; cut_share: "
                  "responses stopped by max_new_tokens.")
SHOWN = ["point", "rollout_share", "tail_ratio", "longest_response", "measured_speedup",
         "measured_min",
         "measured_max", "predicted_speedup", "error_pct", "split_measured", "split_predicted",
         "overlap_measured", "overlap_predicted", "predicted_with_contention", "contention_kappa",
         "contention_kappa_decode"]


def regime_section(run: RunData, sp: pd.DataFrame) -> tuple[str, str] | None:
    """For a run of at least 2 points: write regime.csv and plots/regime.png; -> (title, HTML
    body)."""
    frame = regime_frame(run, sp)
    if len(frame) < 2:
        return None
    frame.to_csv(run.path / "regime.csv", index=False)
    v = verdict(frame)
    plot = plot_map(frame, v.statistic, v.measured, v.predicted,
                    run.path / "plots" / "regime.png") if v else None
    lines = regime_lines(frame)
    points, summary = lines[:len(frame)], lines[len(frame):]
    rows = [[None if x != x else x for x in r] for r in frame[SHOWN].itertuples(index=False)]
    return TITLE, ("".join(f"<p><b>{esc(s)}</b></p>" for s in summary)
                   + (plot_html({"The regime map": plot}) if plot else "")
                   + f"<p>{esc(CAPTION)}</p><ul>" + "".join(f"<li>{esc(s)}</li>" for s in points)
                   + "</ul>"
                   + "<details><summary>The map as a table (regime.csv)</summary>" + table(rows,
                                                                                           SHOWN)
                   + "</details>" + _lengths_html(run, frame))


def _lengths_html(run: RunData, frame: pd.DataFrame) -> str:
    """The length distribution of every tail on the map: regime_lengths.csv, a plot and a table."""
    lengths = length_frame(run, frame)
    if not len(lengths):
        return ""
    lengths.drop(columns="lengths").assign(tail=[tail_label(t) for t in lengths["tail"]]).to_csv(
        run.path / "regime_lengths.csv", index=False)
    plot = plot_lengths(lengths, run.path / "plots" / "regime_lengths.png")
    rows = [[tail_label(r["tail"]),
             *(r[c] for c in LENGTHS[1:])] for r in lengths.to_dict("records")]
    return (f"<h3>Response lengths: drawn tails and natural "
            f"ones</h3>{plot_html({'Response lengths': plot})}<p>{esc(LENGTH_CAPTION)}</p>"
            + table(rows, LENGTHS))


def wide_lines(run: RunData, sp: pd.DataFrame) -> list[str]:
    """The terminal's --wide lines: one sentence per point (its attribution included), then where
    periodic asynchrony pays; none for a multi-seed run or fewer than 2 points."""
    lines = [] if is_multi_seed(run) else regime_lines(regime_frame(run, sp))
    return ["Regime map (regime.csv, plots/regime.png):"] + lines if lines else []


def summary_lines(run: RunData, sp: pd.DataFrame) -> list[str]:
    """summary.md's section."""
    lines = regime_lines(regime_frame(run, sp))
    return ["\n## Where periodic asynchrony pays: the regime map\n"] + [f"- {t}" for t
                                                                        in lines] if lines else []


def markdown_lines(run: RunData, sp: pd.DataFrame) -> list[str]:
    """`rlbench report --markdown`'s section: the map as a table, then its sentences."""
    frame = None if is_multi_seed(run) else regime_frame(run, sp)
    if frame is None or len(frame) < 2:
        return []
    rows = [[fmt(None if v is None or v != v else v) for v in r] for r
            in frame[SHOWN].itertuples(index=False)]
    return ["", "### Regime map", "", markdown_table(SHOWN, rows),
            *[f"- {t}" for t in regime_lines(frame)]]


REPORT = Report(html=regime_section, wide=wide_lines, explains_speedup=True, summary=summary_lines,
                markdown=markdown_lines, change=regime_sentence)
