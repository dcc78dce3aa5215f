"""Statistics of paired ratios, shared by every verdict rlbench states (the run's verdict, regime
map, families ladder, peers table: core/ratio_interval.py, which also accounts for the serial
correlation of successive iterations) and by `rlbench check` (bench/check/stats.py).

A ratio of two throughputs is judged from its paired samples' logs x_k = log(a_k / b_k): iteration k
of two cells (the same lengths drawn, and, when the cells take turns, nearly the same machine), or
one ratio per seed. Their location is the 20%-trimmed mean (robust to a stray iteration, nearly as
efficient as the mean) with the Tukey-McLaughlin standard error and Student's t on n - 2g - 1
degrees of freedom (g values cut at each end). The distributions come from scipy.special (a tenth of
scipy.stats' import time, paid by every command that reads results); tests/unit/core/test_stats.py
holds them equal to scipy.stats'.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special

TRIM = 0.2
LEVEL = 0.95  # every interval rlbench states


def trimmed(x, g: int | None = None) -> tuple[float, float]:
    """(20%-trimmed mean, its standard error) of x; se is inf with fewer than 3 values. The mean is
    scipy.stats.trim_mean's (floor(0.2 n) values cut at each end, or g where given); the error is
    Tukey-McLaughlin's, from the winsorized standard deviation over (1 - 2g/n) sqrt(n) with g values
    cut at each end (scipy.stats.mstats.trimmed_stde divides by (1 - 0.4) whatever n, which is not
    the trimmed fraction when 0.2 n is not whole)."""
    x = np.sort(np.asarray(x, dtype=float))
    n = len(x)
    if n == 0:
        return float("nan"), float("inf")
    g = int(math.floor(TRIM * n)) if g is None else g
    mean = float(x[g:n - g].mean())
    if n < 3:
        return mean, float("inf")
    w = np.clip(x, x[g], x[n - 1 - g])  # winsorized
    se = float(np.std(w, ddof=1) / ((1 - 2 * g / n) * math.sqrt(n)))
    return mean, se


def t_quantile(z: float, df: float) -> float:
    """Student-t critical value with the same one-sided tail as the normal z (scipy.stats.t): a
    verdict over few iterations needs a wider bar than z standard errors."""
    if not math.isfinite(df) or df <= 0:
        return float("inf") if df <= 0 else z
    return float(special.stdtrit(df, special.ndtr(z)))


def normal_quantile(p: float) -> float:
    """The standard normal's p-quantile (scipy.stats.norm.ppf)."""
    return float(special.ndtri(p))


def student_quantile(p: float, df: float) -> float:
    """Student's t p-quantile on df degrees of freedom (scipy.stats.t.ppf)."""
    return float(special.stdtrit(df, p))


def wilson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (scipy.stats.binomtest(k,
    n).proportion_ci(level, method='wilson')), as (low, high)."""
    z = normal_quantile(0.5 + level / 2)
    p, d = k / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z
                                                            / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)
