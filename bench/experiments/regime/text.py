"""The regime map in words: one sentence per point, one for the crossover, one for the prediction.

Renders what analysis.py computed; the terminal, summary.md and report.html all print these
(report.py).
"""
from __future__ import annotations

import math

import pandas as pd
from rlbench.analysis.cost_spread import BUSY_PCT, SPREAD_PCT
from rlbench.analysis.intervals import described, from_columns
from rlbench.experiments.regime.analysis import (STATISTICS, Crossover, MapVerdict,
                                                 prediction_check, verdict)
from rlbench.reports.tables import IN_WORDS


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def x(v) -> str:
    return "n/a" if _missing(v) else f"{v:.2f}×"


def stat_value(name: str, v) -> str:
    """A statistic's value in its unit: 36%, 8.2×, 412 tokens."""
    if _missing(v):
        return "n/a"
    unit = STATISTICS[name].unit
    return (f"{100 * v:.0f}%" if unit == "share" else f"{v:.1f}×" if unit == "ratio"
            else f"{v:.0f} tokens")


def setting(r: dict) -> str:
    """'lognormal lengths (mean 96, sigma 2, max 1536 tokens), 16 prompts × G=4 = 64 samples in
    flight'"""
    n = r["prompts"] * r["group_size"] if not (_missing(r["prompts"])
                                               or _missing(r["group_size"])) else None
    if r["response_length"] == "lognormal":
        lengths = (f"lognormal lengths (mean {r['length_mean']:g}, sigma {r['length_sigma']:g}, "
                   f"max {r['max_new_tokens']} tokens)")
    elif r["response_length"] == "fixed":
        lengths = f"fixed {r['length_mean']:g}-token responses"
    else:
        lengths = f"EOS-ended responses (max {r['max_new_tokens']} tokens)"
    flight = "" if n is None else f", {r['prompts']} prompts × G={r['group_size']} = {n} samples"
    if n is not None and not _missing(r["max_num_seqs"]):
        flight += " in flight" if r["max_num_seqs"] >= n else f", {r['max_num_seqs']} in flight"
    return lengths + flight


def point_sentence(r: dict) -> str:
    """What one point measured (with its interval) and predicted, and why (the barrier's split ×
    overlap)."""
    ratio = from_columns(r, "measured_speedup", "measured")
    verdict = IN_WORDS.get(ratio.outcome, "is not measured")
    spread = "" if _missing(r["measured_min"]) else \
        f" ({described(ratio)}; per iteration {x(r['measured_min'])}–{x(r['measured_max'])})"
    err = "" if _missing(r["error_pct"]) else f" ({r['error_pct']:+.0f}%)"
    why = "" if _missing(r["split_measured"]) else (
        f"; device split alone {x(r['split_measured'])} (predicted {x(r['split_predicted'])}) × "
        f"overlap {x(r['overlap_measured'])} (predicted {x(r['overlap_predicted'])})")
    if not _missing(r["predicted_with_contention"]):
        kappa = (f"measured κ decode {r['contention_kappa_decode']:.2f}, training "
                 f"{r['contention_kappa']:.2f}"
                 if r.get("kappa_source") == "probe" else f"κ {r['contention_kappa']:.2f}")
        why += (f"; with the proposed contention term ({kappa}) predicted "
                f"{x(r['predicted_with_contention'])} ({r['contention_error_pct']:+.0f}%)")
    return (f"{r['point']} ({setting(r)}): sync spends "
            f"{stat_value('rollout_share', r['rollout_share'])} of its iteration generating, its "
            f"longest response is {stat_value('tail_ratio', r['tail_ratio'])} the mean: periodic "
            f"asynchrony {verdict}, {x(r['measured_speedup'])} measured{spread}, predicted "
            f"{x(r['predicted_speedup'])}{err}{why}.")


def crossover_sentence(frame: pd.DataFrame) -> str | None:
    """'periodic asynchrony pays here when …': the crossover along the statistic that explains the
    map best, measured and predicted, and how the other statistics did."""
    v = verdict(frame)
    if v is None:
        return None
    name, best = v.statistic, v.ranked[0]
    n = int(frame[name].notna().sum())
    others = "; ".join(f"{STATISTICS[e['statistic']].label}: {e['misclassified']} misclassified, ρ "
                       f"{_rho(e['spearman'])}" for e in v.ranked[1:])
    evidence = (f"{STATISTICS[name].label} separates wins from losses best: "
                f"{v.measured.misclassified} of {n} points on the wrong side of one threshold, "
                f"Spearman ρ {_rho(best['spearman'])} with the measured speedup"
                + (f" (other statistics — {others})" if others else ""))
    return (
        f"{_verdict(v.measured, name, frame, v.measured_range)}; predicted: "
        f"{_short(v.predicted, name)}. {evidence}."
    )


def crossover_range(r, name: str) -> str:
    """'95% range 31% to 44%': where the crossover lies given the points' intervals
    (regime.CrossoverRange); an open end where the points' upper bounds pay at every one (or their
    lower bounds at none)."""
    if r is None:
        return "no range: the points have no intervals"
    low = "below the lowest point" if r.low is None else stat_value(name, r.low)
    high = "beyond the highest point" if r.high is None else stat_value(name, r.high)
    return f"95% range {low} to {high}"


def _verdict(c: Crossover, name: str, frame: pd.DataFrame, rng=None) -> str:
    if c.kind == "crossing":
        return (f"Periodic asynchrony pays here when "
                f"{STATISTICS[name].condition.format(stat_value(name, c.x))} (measured crossover, "
                f"between {c.below} and {c.above}; {crossover_range(rng, name)})")
    best = frame.loc[pd.to_numeric(frame["measured_speedup"]).idxmax()]
    if c.kind == "everywhere":
        return (
            "Periodic asynchrony pays at every point of this map (lowest speedup"
            f" {x(frame['measured_speedup'].min())})"
        )
    return (
        f"Periodic asynchrony pays nowhere on this map (best {x(best['measured_speedup'])}, at "
        f"{best['point']})"
    )


def _short(c: Crossover | None, name: str) -> str:
    if c is None:
        return "n/a"
    if c.kind == "crossing":
        return f"{stat_value(name, c.x)} (between {c.below} and {c.above})"
    return "pays at every point" if c.kind == "everywhere" else "pays nowhere"


def _rho(v) -> str:
    return "n/a" if _missing(v) else f"{v:.2f}"


def prediction_sentence(frame: pd.DataFrame) -> str | None:
    chk = prediction_check(frame)
    if not chk["points"]:
        return None
    out = (f"Prediction within ±{chk['tolerance_pct']:.0f}% at {chk['within']} of {chk['points']} "
           f"points (worst: {chk['worst_point']}, {chk['worst_error_pct']:+.0f}%)")
    con = prediction_check(frame, column="contention_error_pct")
    if con["points"]:
        out += (f"; with the proposed contention term (core/costmodel/contention.py): "
                f"{con['within']} of {con['points']} (worst: {con['worst_point']}, "
                f"{con['worst_error_pct']:+.0f}%)")
    return out + "." + _spread_clause(frame, chk["tolerance_pct"])


def _spread_clause(frame: pd.DataFrame, tolerance_pct: float) -> str:
    """Which misses ran the same work at different CPU costs in different cells
    (analysis/cost_spread.py)."""
    misses = [r for r in frame.to_dict("records") if not _missing(r["error_pct"])
              and abs(r["error_pct"]) > tolerance_pct]
    if not misses or "train_cost_spread_pct" not in frame:
        return ""
    busy = [r for r in misses if _or0(r.get("descheduled_pct")) > BUSY_PCT]
    spread = [r for r in misses if r not in busy
              and max(_or0(r["train_cost_spread_pct"]),
                      _or0(r["rollout_cost_spread_pct"])) > SPREAD_PCT]
    if not busy and not spread:
        return (f" The misses' cells paid the same CPU for the same work (within "
                f"{SPREAD_PCT:.0f}%) on cores no other work held: the model misses there.")
    said = []
    if busy:
        listed = "; ".join(f"{r['point']}: {r['descheduled_pct']:.0f}%" for r in busy)
        said.append(f"{len(busy)} of the {len(misses)} misses ran while other work held the cores "
                    f"(their workers waited for a core for part of their compute time: {listed})")
    if spread:
        listed = "; ".join(f"{r['point']}: training {_pct(r['train_cost_spread_pct'])}, rollout "
                           f"{_pct(r['rollout_cost_spread_pct'])}" for r in spread)
        said.append(f"{len(spread)} of the {len(misses)} misses ran the same work at CPU costs "
                    f"more than {SPREAD_PCT:.0f}% apart between their cells ({listed}): the "
                    f"measurement moved under the prediction there")
    return (
        f" {'; '.join(said)}: re-run those points on a quiet machine before reading the miss as the"
        " model's."
    )


def _or0(v) -> float:
    return 0.0 if _missing(v) else float(v)


def _pct(v) -> str:
    return "n/a" if _missing(v) else f"+{v:.0f}%"


def regime_lines(frame: pd.DataFrame) -> list[str]:
    """Every sentence of a map of at least 2 points (nothing for fewer: a single comparison is the
    attribution sentence's)."""
    if len(frame) < 2:
        return []
    lines = [point_sentence(r) for r in frame.to_dict("records")]
    return lines + [s for s in (crossover_sentence(frame), prediction_sentence(frame)) if s]


def regime_sentence(v: MapVerdict) -> str:
    """What the regime map says would change the verdict's answer: its measured crossover with its
    range (from the points' intervals), and the predicted one."""
    c, name = v.measured, v.statistic
    if c.kind == "crossing":
        predicted = v.predicted
        pred = "" if predicted is None or predicted.kind != "crossing" else \
            f"; predicted {stat_value(name, predicted.x)}"
        return (f"On this machine it pays when "
                f"{STATISTICS[name].condition.format('about ' + stat_value(name, c.x))} (the "
                f"regime map's crossover, between {c.below} and {c.above}; "
                f"{crossover_range(v.measured_range, name)}{pred}).")
    where = "at every point" if c.kind == "everywhere" else "at no point"
    return (
        f"On this machine it pays {where} of the regime map ({STATISTICS[name].label} from its"
        " points)."
    )
