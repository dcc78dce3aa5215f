"""The report's time-to-accuracy section and its terminal text (analysis/accuracy.py for the clock,
the interval and the target)."""
from __future__ import annotations

import base64
import math
from pathlib import Path

import pandas as pd

from rlbench.analysis.accuracy import TARGET_SHARE
from rlbench.reports.html import esc, table as html_table
from rlbench.reports.tables import fmt

HEAD = ["cell", "seeds", "TPSPD median [seeds]", "pass@1 first→final [95%]", "gain points [95%]",
        "any format first→final [95%]", "reached target", "time to target s [95%]",
        "samples to target",
        "ref time / time", "train wall s", "mixed groups % first→last"]
SEEN_HEAD = "seen facts first→final"  # data.split fact only (held-out pass@1 is the pass@1 column)


def _m(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _final(r: dict, name: str) -> str:
    """The final value of `name` with its interval."""
    return _span(r[f"{name}_final"], r[f"{name}_final_lo"], r[f"{name}_final_hi"])


def _span(v, lo, hi) -> str:
    if _m(v):
        return "–"
    return fmt(v) if _m(lo) or _m(hi) or lo == hi else f"{fmt(v)} [{fmt(lo)}–{fmt(hi)}]"


def _pct(a, b) -> str:
    return "–" if _m(a) or _m(b) else f"{100 * a:.0f}→{100 * b:.0f}"


def _gain(r) -> str:
    """Gain in points (pass@1 x 100) with its 95% t-interval over seeds."""
    if _m(r["gain"]):
        return "–"
    g = f"{100 * r['gain']:+.1f}"
    return g if _m(r["gain_lo"]) else f"{g} [{100 * r['gain_lo']:+.1f}, {100 * r['gain_hi']:+.1f}]"


def _time(r) -> str:
    """Time to target: mean with its 95% t-interval over the seeds that reached it (two or more),
    else the one seed's time."""
    if not _m(r["time_to_target_s_mean"]):
        return _span(r["time_to_target_s_mean"], r["time_to_target_s_lo"], r["time_to_target_s_hi"])
    return _span(r["time_to_target_s"], None, None)


def head(table: pd.DataFrame) -> list[str]:
    return HEAD + [SEEN_HEAD] if _fact_split(table) else HEAD


def _fact_split(table: pd.DataFrame) -> bool:
    return "eval_split" in table and (table["eval_split"] == "fact").any()


def text_rows(table: pd.DataFrame) -> list[list[str]]:
    """head()'s columns of the accuracy table, as text."""
    out = []
    for r in table.to_dict("records"):
        row = [str(r["cell"]), str(r["seeds"]),
               _span(r["tpspd_median"], r["tpspd_seed_min"], r["tpspd_seed_max"]),
               f"{fmt(r['accuracy_first'])}→{_final(r, 'accuracy')}",
               _gain(r), f"{fmt(r['any_format_first'])}→{_final(r, 'any_format')}",
               str(r["reached"]), _time(r), fmt(r["samples_to_target"]),
               fmt(r["time_ratio_vs_reference"]),
               fmt(r["train_wall_s"]), _pct(r["mixed_groups_first"], r["mixed_groups_last"])]
        if _fact_split(table):
            row.append(f"{fmt(r['seen_first'])}→{fmt(r['seen_final'])}")
        out.append(row)
    return out


def workload_label(table: pd.DataFrame) -> str:
    """What the accuracy measures on this workload: held-out skill, or the text split's demo."""
    if _fact_split(table):
        return ("Held-out facts (data.split fact): pass@1 is on problems whose every step's fact "
                "(its numbers and operation, in any order or inverse) never occurs in training or "
                "the warm start; 'seen facts' scores problems made of trained facts, so "
                "memorisation and skill can be told apart.")
    return ("Text split (data.split text): evaluation problems differ from training in wording "
            "only, the same arithmetic facts recur. On the default config this is a short "
            "format-learning demo (RL teaches the `#### N` ending the strict reward reads), not a "
            "measure of arithmetic skill: for that, configs/cpu-heldout.yaml.")


def explanation(table: pd.DataFrame) -> str:
    target = table["target"].iloc[0] if len(table) else None
    what = ("no target: the reference cell did not improve" if _m(target) else
            f"target pass@1 {target:.3f}: per seed, {100 * TARGET_SHARE:.0f}% of the way from that "
            "seed's reference cell's first to its last evaluation (shown: the median over seeds); "
            "reached: seeds that reached their target, of those whose reference improved")
    return (f"{workload_label(table)} Time-to-accuracy, {what}. Wall time is training time: the "
            "summed TPSPD windows of the iterations before each evaluation (nothing between "
            "iterations counts), the same clock for every schedule; a crossing is interpolated "
            "between evaluations. Intervals: 95% t-interval of the mean over seeds (one seed: "
            "Wilson over the eval problems), also for the gain (last minus first evaluation, in "
            "points) and the time to target (mean over the seeds that reached it); [a–b] after "
            "TPSPD: the spread over seeds. ref time / time > 1: reaches the target sooner than the "
            "reference. Mixed groups: share of GRPO groups whose rewards differ (the only ones "
            "with a gradient), first and last quarter of the iterations.")


def accuracy_text(table: pd.DataFrame) -> list[str]:
    """Aligned plain-text table plus its explanation, for the terminal; [] without evaluations."""
    if not len(table):
        return []
    rows = [head(table)] + text_rows(table)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return ["", *lines, explanation(table)]


def accuracy_html(table: pd.DataFrame, plots: dict[str, Path], captions: dict[str, str]) -> str:
    """The section's body: explanation, table, figures."""
    if not len(table):
        return "<p>No evaluations recorded.</p>"
    def png(path) -> str:
        return base64.b64encode(Path(path).read_bytes()).decode("ascii")

    figs = "".join(f'<figure><img alt="{esc(t)}" src="data:image/png;base64,{png(p)}">'
                   f"<figcaption><b>{esc(t)}.</b> {esc(captions.get(t, ''))}</figcaption></figure>"
                   for t, p in plots.items())
    return f"<p>{esc(explanation(table))}</p>" + html_table(text_rows(table), head(table)) + figs
