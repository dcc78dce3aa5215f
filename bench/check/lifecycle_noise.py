"""The measured noise of the metrics outside the iterations (bench/check/lifecycle.py), from
unchanged A/B runs (`rlbench check --calibrate`, bench/check/ab_power.py), and the floor it
suggests.

Each such metric is one log(new / old) per run; in an unchanged run it is pure noise (which process
landed where, what else the machine did while both trees started). Per family, over every run and
cell (or process): the spread (root mean square of the log-ratios, about 0: any systematic old/new
difference is noise too), the largest, and how many exceed the floor in use (false alarms of one
value each). The floor a family should have: at least 4 x the spread and 1.5 x the largest seen,
rounded up to whole percent (10 runs are too few to trust a spread alone: the 1.5 x largest guards
the tail), and at least MIN_FLOOR. Detection: each unchanged value again, raised by log(1 + f):
flagged where it then lies beyond the floor.
"""
from __future__ import annotations

import math

import numpy as np

from rlbench.check import lifecycle
from rlbench.core.results.metric_table import family

SIZES = (0.10, 0.20, 0.50)
# No floor under 5%, however quiet a metric (peak memory varies by well under 1%): a smaller change
# is not worth a failure, as for the paired metrics' 6% floor (bench/check/ab.py).
MIN_FLOOR = 0.05


def noise(runs: list[dict]) -> dict[str, dict]:
    """{family (the first cell's start-up a row of its own): {"n", "rms", "max", "over",
    "runs_over", "suggested", "floor", "detect": {f: (hits, n)}}} from the runs' paired metrics
    (bench/check/ab.py paired_metrics, one dict per run, holding only metrics nothing was planted
    in)."""
    groups: dict[str, list[list[float]]] = {}
    floors: dict[str, float] = {}
    for metrics in runs:
        per: dict[str, list[float]] = {}
        for name, m in metrics.items():
            if family(name) in lifecycle.FLOORS and m["log_ratios"]:
                key = family(name) + (" (first cell)" if m.get("first_cell") else
                                       " (all cells)" if name == lifecycle.POOLED_EVAL else "")
                per.setdefault(key, []).append(m["log_ratios"][0])
                floors[key] = lifecycle.floor(name, m)
        for key, values in per.items():
            groups.setdefault(key, []).append(values)
    return {key: _row(groups[key], floors[key]) for key in sorted(groups, key=_order)}


def _order(key: str) -> tuple[int, str]:
    return list(lifecycle.FLOORS).index(key.split(" ")[0]), key


def _row(per_run: list[list[float]], floor: float) -> dict:
    x, bar = np.array([v for r in per_run for v in r]), math.log1p(floor)
    rms, top = float(np.sqrt(np.mean(x ** 2))), float(np.max(np.abs(x)))
    suggested = max(MIN_FLOOR, math.ceil(100 * math.expm1(max(4 * rms, 1.5 * top))) / 100)
    return {"n": len(x), "runs": len(per_run), "rms": rms, "max": top, "floor": floor,
            "suggested": suggested,
            "over": int(np.sum(x > bar)),
            "runs_over": sum(any(v > bar for v in r) for r in per_run),
            "detect": {f: (int(np.sum(x + math.log1p(f) > bar)), len(x)) for f in SIZES}}


def format_noise(res: dict[str, dict]) -> list[str]:
    """The README's table of the noise, floors and detection of the metrics outside the
    iterations."""
    lines = ["Metrics outside the iterations (one value per cell or process and tree; the "
             "unchanged runs, and the cells nothing was planted in of the planted runs): log(new / "
             "old) spread (root mean square), largest, the floor in use and the one this noise "
             "suggests (max(4 x spread, 1.5 x largest, 5%)), values beyond the floor (false "
             "alarms), and one value raised by "
             + "/".join(f"{f:.0%}" for f in SIZES) + " caught", "",
             "| family | values | spread | largest | floor (suggested) | beyond the floor | "
             + " | ".join(f"+{f:.0%}" for f in SIZES) + " |", "|---|" + "---|" * (5 + len(SIZES))]
    for fam, r in res.items():
        det = " | ".join(f"{h}/{n} ({h / n:.0%})" for h, n in r["detect"].values())
        lines.append(f"| {fam} | {r['n']} | {math.expm1(r['rms']):.1%} | "
                     f"{math.expm1(r['max']):.1%} | {r['floor']:.0%} ({r['suggested']:.0%}) | "
                     f"{r['over']} ({r['runs_over']} of {r['runs']} runs) | {det} |")
    return lines
