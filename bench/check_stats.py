"""The statistics of `rlbench check` for paired ratios: how much a metric changed and whether that is
beyond the noise this machine was measured to have (bench/baselines/README.md, "Verdict").

A metric's samples are per-iteration log-ratios x_k (bench/check_metrics.py). Its statistic is their
20%-trimmed mean (robust to a stray iteration, nearly as efficient as the mean), with the
Tukey-McLaughlin standard error. Per-iteration noise is not the whole story: a run also varies as a
whole (which core a process lands on, what else the machine does), so the within-run error is scaled
by an inflation factor `c` measured on repeated unchanged runs (`calibrate`). The change of a run
against the baseline is d = stat(run) - stat(baseline) in log units, with standard error
sqrt((c * se_run)^2 + se_base^2); it is a regression when it lies beyond z of them in the bad
direction and beyond the metric's floor (`tolerance`).
"""
from __future__ import annotations

import math

import numpy as np

TRIM = 0.2
# z = 3.0 one-sided: a false alarm per metric of 0.13%; over the ~25 performance metrics of the CI
# ablation, at most ~3% of unchanged runs fail (Bonferroni bound), inside the 1-in-20 target.
DEFAULTS = {"statistic": f"{TRIM:.0%}-trimmed mean of per-iteration log-ratios", "z": 3.0, "inflation": 1.0,
            "runs": 1}


def trimmed(x) -> tuple[float, float]:
    """(20%-trimmed mean, its standard error) of x; se is inf with fewer than 3 values."""
    x = np.sort(np.asarray(x, dtype=float))
    n = len(x)
    if n == 0:
        return float("nan"), float("inf")
    g = int(math.floor(TRIM * n))
    mean = float(np.mean(x[g:n - g])) if n - 2 * g > 0 else float(np.median(x))
    if n < 3:
        return mean, float("inf")
    w = np.clip(x, x[g], x[n - 1 - g])  # winsorized
    se = float(np.std(w, ddof=1) / ((1 - 2 * g / n) * math.sqrt(n)))
    return mean, se


def change(base: dict, cur: dict, stats: dict) -> tuple[float, float]:
    """(d, se_d) in log units for a metric with log_ratios samples on both sides. The baseline's own
    error is its stored `se` (from several calibration runs) or, else, its samples' scaled by c."""
    c = float(stats.get("inflation", 1.0))
    s_cur, se_cur = trimmed(cur["samples"]["log_ratios"])
    s_base = math.log(base["value"])
    se_base = base.get("se")
    if se_base is None:
        se_base = c * trimmed(base["samples"]["log_ratios"])[1]
    return s_cur - s_base, math.sqrt((c * se_cur) ** 2 + se_base ** 2)


def verdict(base: dict, cur: dict, stats: dict) -> tuple[str, tuple[float, float], str]:
    """(mark, 95% interval of the relative change, note) for a paired ratio metric."""
    d, se = change(base, cur, stats)
    z = float(stats.get("z", DEFAULTS["z"]))
    floor = math.log1p(float(base.get("tolerance", 0.0)))
    ci = (math.expm1(d - 1.96 * se), math.expm1(d + 1.96 * se))
    bar = max(z * se, floor)
    note = f"flagged beyond {math.expm1(bar):+.1%} (z={z:g} x se {se:.3f}, floor {math.expm1(floor):.0%})"
    if abs(d) <= bar or not math.isfinite(se):
        return "not significant", ci, note.replace("flagged", "within; flagged")
    bad = d < 0 if base["direction"] == "higher_is_better" else d > 0
    return ("worse" if bad else "better"), ci, note


def calibrate(per_run: list[dict[str, list[float]]]) -> tuple[dict[str, tuple[float, float]], float]:
    """From R unchanged runs ({metric: log_ratios} each): ({metric: (value, se of the baseline value)},
    inflation c). c^2 = pooled between-run variance of the statistic / pooled within-run se^2, at
    least 1; pooled over metrics because R is small. The baseline value is the mean over runs."""
    names = [n for n in per_run[0] if all(n in r for r in per_run)]
    stats = {n: [trimmed(r[n]) for r in per_run] for n in names}
    R = len(per_run)
    between = sum(np.var([s for s, _ in v], ddof=1) for v in stats.values()) if R > 1 else 0.0
    within = sum(np.mean([se ** 2 for _, se in v]) for v in stats.values())
    c = max(1.0, math.sqrt(between / within)) if R > 1 and within > 0 else 1.0
    out = {}
    for n, v in stats.items():
        mean = float(np.mean([s for s, _ in v]))
        se = c * math.sqrt(np.mean([e ** 2 for _, e in v])) / math.sqrt(R)
        out[n] = (math.exp(mean), se)
    return out, c
