"""The regime map plot, the report's headline for `--ablation regime`.

Left: measured (min–max over iterations) and predicted speedup against the statistic that explains
the map best (analysis.py explain), the 1.0 line and both crossovers. Right: the grid itself, tail
by batch, coloured by measured speedup (red loses, blue wins) with the prediction beside it.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from rlbench.experiments.regime.analysis import STATISTICS, WIN, Crossover, tail_key
from rlbench.reports.palette import cell_color, stage_color
from rlbench.reports.plots import MARKERS, save

MEASURED, PREDICTED = "#333333", stage_color("rollout")


def _f(v) -> float:
    return float("nan") if v is None else float(v)


def plot_map(frame: pd.DataFrame, statistic: str, measured: Crossover | None,
             predicted: Crossover | None,
             path: Path) -> Path | None:
    """regime.png; None for a map of fewer than 2 points."""
    if len(frame) < 2:
        return None
    fig = Figure(figsize=(12.5, 4.4), layout="constrained")
    ax, grid = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.5, 1]})
    _curves(ax, frame, statistic, measured, predicted)
    _grid(fig, grid, frame)
    return save(fig, path)


def _curves(ax, frame: pd.DataFrame, statistic: str, measured: Crossover | None,
            predicted: Crossover | None):
    share = STATISTICS[statistic].unit == "share"
    scale = 100.0 if share else 1.0
    rows = frame.assign(_x=[scale * _f(v) for v in frame[statistic]]).sort_values("_x")
    prompts = sorted({p for p in rows["prompts"] if p == p and p is not None})
    for i, p in enumerate(prompts or [None]):
        sub = rows if p is None else rows[rows["prompts"] == p]
        y = [_f(v) for v in sub["measured_speedup"]]
        err = [[max(0.0, m - _f(lo)) if lo == lo and lo is not None else 0
                for m, lo in zip(y, sub["measured_min"])],
               [max(0.0, _f(hi) - m) if hi == hi and hi is not None else 0
                for m, hi in zip(y, sub["measured_max"])]]
        tag = "" if p is None else f", {p} prompts"
        ax.errorbar(sub["_x"], y, yerr=err, fmt=MARKERS[i % len(MARKERS)], color=MEASURED,
                    capsize=4, ms=7,
                    label=f"measured{tag}")
        ax.scatter(sub["_x"], [_f(v) for v in sub["predicted_speedup"]],
                   marker=MARKERS[i % len(MARKERS)],
                   facecolors="none", edgecolors=PREDICTED, s=70, lw=1.5, zorder=3,
                   label=f"predicted{tag}")
        # one curve per batch size: along it only the tail changes
        ax.plot(sub["_x"], y, "-", color=MEASURED, lw=0.8, alpha=0.6)
        ax.plot(sub["_x"], [_f(v) for v in sub["predicted_speedup"]], "--", color=PREDICTED, lw=0.8,
                alpha=0.8)
    middle = (rows["_x"].min() + rows["_x"].max()) / 2
    for _, r in rows.iterrows():  # labels lean inwards, so that none crosses the frame
        right = r["_x"] > middle
        ax.annotate(str(r["point"]), (r["_x"], _f(r["measured_speedup"])), fontsize=7,
                    textcoords="offset points",
                    xytext=(-6 if right else 6, 4), ha="right" if right else "left")
    ax.margins(x=0.06, y=0.12)
    ax.axhline(WIN, color="black", lw=0.8, ls=":")
    for c, color, ls, who in ((measured, MEASURED, "-", "measured"),
                              (predicted, PREDICTED, "--", "predicted")):
        if c is not None and c.kind == "crossing":
            ax.axvline(scale * c.x, color=color, lw=1.2, ls=ls, alpha=0.8)
            ax.annotate(f"{who} crossover {scale * c.x:.0f}{'%' if share else ''}",
                        (scale * c.x, WIN),
                        fontsize=8, color=color, rotation=90, textcoords="offset points",
                        xytext=(-10, 8))
    ax.set(xlabel=STATISTICS[statistic].label + (" (%)" if share else ""),
           ylabel="periodic-async / sync TPSPD",
           title="Where periodic asynchrony pays: speedup along the "
           "statistic that explains it best")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=7, frameon=False, loc="best")


def tail_label(key: tuple) -> str:
    """'σ 2, max 1536' for a drawn tail, 'EOS, max 384' for EOS-ended responses
    (regime.tail_key)."""
    kind, max_tokens, sigma, _ = key
    if kind == "eos":
        return f"EOS, max {max_tokens}"
    return f"σ {sigma:g}, max {max_tokens}" if kind == "lognormal" else f"{kind}, max {max_tokens}"


def _order(key: tuple) -> tuple:
    """Drawn tails by sigma then max (lightest first), EOS-ended ones last."""
    kind, max_tokens, sigma, mean = key
    return (kind == "eos", -math.inf if sigma is None else sigma, max_tokens or 0, mean or 0)


def _grid(fig, ax, frame: pd.DataFrame):
    """Tails (rows, lightest first) by prompts per iteration (columns): measured speedup
    (predicted)."""
    recs = frame.to_dict("records")
    tails = sorted({tail_key(r) for r in recs}, key=_order)
    cols = sorted({r["prompts"] for r in recs}, key=lambda v: -math.inf if v is None else v)
    cell = {(tail_key(r), r["prompts"]): r for r in recs}
    values = [[_f(cell[(t, p)]["measured_speedup"]) if (t, p) in cell else math.nan for p in cols]
              for t in tails]
    flat = [v for row in values for v in row if not math.isnan(v)] or [WIN]
    norm = TwoSlopeNorm(vcenter=WIN, vmin=min(min(flat), WIN - 0.01),
                        vmax=max(max(flat), WIN + 0.01))
    img = ax.imshow(values, cmap="RdBu", norm=norm, aspect="auto")
    for i, t in enumerate(tails):
        for j, p in enumerate(cols):
            r = cell.get((t, p))
            if r is not None:
                # white text on the saturated ends
                dark = abs(norm(_f(r["measured_speedup"])) - 0.5) > 0.3
                ax.text(j, i,
                        f"{_f(r['measured_speedup']):.2f}×\n(pred "
                        f"{_f(r['predicted_speedup']):.2f}×)",
                        ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.set_xticks(range(len(cols)), [f"{p} prompts" for p in cols], fontsize=8)
    ax.set_yticks(range(len(tails)), [tail_label(t) for t in tails], fontsize=8)
    ax.set_title("The map: measured speedup (predicted)", fontsize=10)
    fig.colorbar(img, ax=ax, fraction=0.05, label="measured speedup")


def plot_lengths(lengths: pd.DataFrame, path: Path) -> Path | None:
    """regime_lengths.png: share of responses at least x tokens long, per tail
    (regime.length_frame): drawn tails solid, EOS-ended (a model's own) dashed; log axes show the
    tail."""
    if not len(lengths):
        return None
    fig = Figure(figsize=(7.5, 4.0), layout="constrained")
    ax = fig.subplots()
    for i, r in enumerate(sorted(lengths.to_dict("records"), key=lambda r: _order(r["tail"]))):
        v = r["lengths"]
        surv = [1.0 - k / len(v) for k in range(len(v))]  # P(length >= v[k]) for sorted v
        eos = r["response_length"] == "eos"
        ax.step(v, surv, where="post", ls="--" if eos else "-", lw=2.0 if eos else 1.3,
                color=cell_color(i),
                label=f"{tail_label(r['tail'])} ({r['points']}): mean {r['mean']:.0f}, max "
                      f"{r['max']:.0f}")
    ax.set(xscale="log", yscale="log", xlabel="response length (tokens)",
           ylabel="share of responses ≥ length",
           title="Response lengths per tail (sync cells, measured iterations)")
    ax.title.set_fontsize(10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, frameon=False, loc="lower left")
    return save(fig, path)
