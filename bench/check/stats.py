"""The statistics of `rlbench check` for paired ratios: how much a metric changed and whether that
is beyond the noise this machine was measured to have (bench/baselines/README.md, "Verdict").

A metric's samples are per-iteration log-ratios x_k (bench/check/metrics.py). Its statistic is their
20%-trimmed mean (robust to a stray iteration, nearly as efficient as the mean), with the
Tukey-McLaughlin standard error (core/stats.py, which every verdict of a run uses too).
Per-iteration noise is not the whole story: a run also varies as a whole (what else the machine does
while it runs), so a baseline calibrated from R unchanged runs
(`calibrate`) stores, per metric, the run-level spread `run_sd` beyond the within-run error and the
standard error `se` of its value (the mean over the runs). The change of a run against the baseline
is d = stat(run) - log(baseline value), with standard error sqrt(se_run^2 + run_sd^2 + se^2); it is
a regression when it lies beyond z of them in the bad direction and beyond the metric's floor
(`tolerance`). A baseline from one run knows no run_sd: its within-run errors are scaled by the
`inflation` factor instead (1 unless set).
"""
from __future__ import annotations

import math

import numpy as np

# this module's API: ab.py, calibrate
from rlbench.core.stats import TRIM, t_quantile, trimmed  # noqa: F401

# z = 2.5 one-sided (stored-baseline checks, `--baseline`): a false alarm per metric of 0.6% were
# the errors exact; what counts is measured. The last study (9 unchanged runs,
# bench/baselines/README.md) flagged 0/9 real held-out runs but 13.2% of resampled pseudo-runs (an
# upper estimate); z = 3 halved that and cut detection of 10% slowdowns to 75-80%. The A/B check
# (`--against`, bench/check/ab.py) has statistics of its own, measured separately.
DEFAULTS = {"statistic": f"{TRIM:.0%}-trimmed mean of per-iteration log-ratios", "z": 2.5,
            "inflation": 1.0,
            "runs": 1}


def change(base: dict, cur: dict, stats: dict) -> tuple[float, float]:
    """(d, se_d) in log units for a metric with log_ratios samples in the run."""
    s_cur, se_cur = trimmed(cur["samples"]["log_ratios"])
    d = s_cur - math.log(base["value"])
    if "run_sd" in base:  # calibrated from several runs
        return d, math.sqrt(se_cur ** 2 + base["run_sd"] ** 2 + base["se"] ** 2)
    c = float(stats.get("inflation", 1.0))
    se_base = base.get("se")
    if se_base is None:
        se_base = c * trimmed(base["samples"]["log_ratios"])[1]
    return d, math.sqrt((c * se_cur) ** 2 + se_base ** 2)


def verdict(base: dict, cur: dict, stats: dict) -> tuple[str, tuple[float, float], str]:
    """(mark, 95% interval of the relative change, note) for a paired ratio metric."""
    d, se = change(base, cur, stats)
    z = float(stats.get("z", DEFAULTS["z"]))
    floor = math.log1p(float(base.get("tolerance", 0.0)))
    ci = (math.expm1(d - 1.96 * se), math.expm1(d + 1.96 * se))
    bar = max(z * se, floor)
    note = (f"flagged beyond {math.expm1(bar):+.1%} (z={z:g} x se {se:.3f}, floor "
            f"{math.expm1(floor):.0%})")
    if abs(d) <= bar or not math.isfinite(se):
        return "not significant", ci, note.replace("flagged", "within; flagged")
    bad = d < 0 if base["direction"] == "higher_is_better" else d > 0
    return ("worse" if bad else "better"), ci, note


def calibrate(per_run: list[dict[str, list[float]]]) -> tuple[dict[str, tuple[float, float, float]],
                                                              float]:
    """From R unchanged runs ({metric: log_ratios} each): ({metric: (value, se, run_sd)}, inflation
    c). value = exp(mean statistic over runs); run_sd^2 = between-run variance of the statistic
    minus the mean within-run se^2, and at least (c^2 - 1) x that se^2, where c^2 = pooled
    between-run variance / pooled within-run se^2 (how much runs differ beyond their own iterations'
    noise); se^2 = (within se^2 + run_sd^2) / R."""
    names = [n for n in per_run[0] if all(n in r for r in per_run)]
    R = len(per_run)
    st = {n: [trimmed(r[n]) for r in per_run] for n in names}
    m = {n: np.array([a for a, _ in v]) for n, v in st.items()}
    w = {n: float(np.mean([b ** 2 for _, b in v])) for n, v in st.items()}
    v = {n: float(np.var(m[n], ddof=1)) if R > 1 else w[n] for n in names}
    c2 = sum(v.values()) / sum(w.values()) if R > 1 and sum(w.values()) > 0 else 1.0
    out = {}
    for n in names:
        # With few runs one metric's spread is a poor estimate: take at least the pooled share
        # (c^2 - 1) of its own within-run error as run-level spread.
        tau2 = max(v[n] - w[n], (c2 - 1.0) * w[n], 0.0)
        out[n] = (math.exp(float(np.mean(m[n]))), math.sqrt((w[n] + tau2) / R), math.sqrt(tau2))
    return out, math.sqrt(c2)
