"""The one estimator of a ratio of two throughputs and its interval, for every verdict rlbench
states (the run's verdict, the speedup table, regime map, families ladder, peers table:
analysis/intervals.py).

The samples are paired log-ratios x_k = log(a_k / b_k), one per iteration both cells measured, in
iteration order. The value stated is exp of their trimmed mean (core/stats.py `trimmed`: robust to a
stalled iteration), and the interval is centred on it (symmetric in log units), so the value printed
is always the centre of the interval printed with it. The trimming (`trim_count`) is 20% of the
values beyond the first TRIM_FROM: none below 10, one at each end from 10, two from 15, ..., 20% in
the limit. Cutting 20% of every n (one value at each end from n = 5) cost more degrees of freedom
than the fifth value brought: n = 5 called a true 10% difference less often than n = 4 did, and said
"too few" more often (docs/results/intervals.md); cut this way, each added iteration adds at least
what the trimming takes.

Successive iterations are not independent: adjacent periodic-async iterations share a rollout, and a
machine's speed drifts over minutes. With lag-1 autocorrelation rho, the variance of a mean of n
values is larger than s^2 / n, and the sample variance itself is smaller than the values' variance;
for an AR(1) series both are known exactly (`inflation`), so the standard error is multiplied by the
square root of their ratio and the degrees of freedom shrink to those of a variance estimated from n
(1 - rho^2) / (1 + rho^2) independent values (the equivalent-sample-size t-test; von Storch &
Zwiers, Statistical Analysis in Climate Research, 1999, chapter 6). rho cannot be estimated from a
handful of iterations: the sample lag-1 autocorrelation is biased down by about (1 + 3 rho) / n
(Marriott & Pope 1954, Biometrika 41:390) and its spread at n = 6 is +-0.4, which makes the
equivalent-sample-size test with rho estimated alone reject far above its level at small n (Zwiers &
von Storch 1995, J. Climate 8:336). So rho is the bias-corrected estimate, but never below
RHO_FLOOR, the correlation assumed of adjacent iterations when the data cannot show it, nor above
RHO_MAX. `scripts/interval_study.py` measures what this gives (false verdicts and power per n and
rho); the table and the command: docs/results/intervals.md. Fewer than MIN_PAIRED samples give no
interval: too few to hold the level. A short series that looks so correlated that fewer than MIN_DF
degrees of freedom are left gets the interval of MIN_DF (t on one degree of freedom, 12.7 standard
errors at 95%: wide, and "even" unless the difference is large) rather than none, so that whether a
run says "too few" depends on its length alone and one more iteration never turns an interval into
"too few".

Samples that are independent by construction (one ratio per seed: separate processes and seeds) take
serial=False: no inflation, the plain Yuen-Tukey-McLaughlin interval of the trimmed mean.
"""
from __future__ import annotations

import math

import numpy as np

from rlbench.core.stats import LEVEL, TRIM, normal_quantile, t_quantile, trimmed

# the serial correlation assumed where a short series cannot show it (module docstring)
RHO_FLOOR = 0.5
RHO_MAX = 0.9  # beyond this the inflation explodes on a noisy estimate
# fewer paired samples: no interval (the verdict says too few); docs/results/intervals.md
MIN_PAIRED = 4
# the fewest degrees of freedom an interval is given (a short series that looks strongly correlated)
MIN_DF = 1.0
TRIM_FROM = 5  # values beyond these are trimmed 20% (trim_count)


def trim_count(n: int) -> int:
    """Values cut at each end of n (the module docstring): floor(0.2 (n - TRIM_FROM)), at least
    0."""
    return max(0, int(math.floor(TRIM * (n - TRIM_FROM))))


def lag1(x) -> float:
    """The lag-1 autocorrelation of x in its order, of the values winsorized as the trimmed mean
    cuts them (a stalled iteration would otherwise decide it), with Marriott and Pope's bias
    correction r + (1 + 3 r) / n (r clipped at 0 inside the correction); 0 for a constant series."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    s = np.sort(x)
    g = trim_count(n)
    d = np.clip(x, s[g], s[n - 1 - g])
    d = d - d.mean()
    ss = float((d * d).sum())
    if n < 3 or ss <= 0:
        return 0.0
    r = float((d[1:] * d[:-1]).sum() / ss)
    return r + (1 + 3 * max(r, 0.0)) / n


def inflation(n: int, rho: float) -> float:
    """Var(mean of n values) / E[s^2 / n] for an AR(1) series with lag-1 correlation rho: the factor
    by which a standard error computed as if the values were independent must grow, squared. 1 at
    rho = 0."""
    if n < 2 or rho == 0:
        return 1.0
    k = np.arange(1, n)
    p = rho ** k
    var_mean = 1 + 2 * float(((1 - k / n) * p).sum())  # n Var(mean) / var
    mean_s2 = 1 - 2 * float(((n - k) * p).sum()) / (n * (n - 1))  # E[s^2] / var
    return var_mean / mean_s2


def serial_rho(x) -> float:
    """The correlation the interval assumes: the bias-corrected lag-1 estimate within [RHO_FLOOR,
    RHO_MAX]."""
    return min(max(lag1(x), RHO_FLOOR), RHO_MAX)


def log_estimate(x, serial: bool = True) -> tuple[float, float, float] | None:
    """(centre, standard error, degrees of freedom) in log units of log-ratios x in order: the
    trimmed mean, its error grown for serial correlation (serial) and the t distribution's degrees
    of freedom (at least MIN_DF); None with fewer than MIN_PAIRED finite values."""
    x = [float(v) for v in x if v is not None and math.isfinite(v)]
    n = len(x)
    if n < MIN_PAIRED:
        return None
    g = trim_count(n)
    centre, se = trimmed(x, g)
    df = n - 2 * g - 1
    if serial:
        rho = serial_rho(x)
        se *= math.sqrt(inflation(n, rho))
        df *= (1 - rho * rho) / (1 + rho * rho)
    return centre, se, max(df, MIN_DF)


def ratio_interval(x, serial: bool = True,
                   level: float = LEVEL) -> tuple[float, float, float] | None:
    """(value, low, high) of the typical ratio from log-ratios x in order: value = exp(trimmed
    mean), the interval centred on it in log units; None with fewer than MIN_PAIRED finite values.
    serial: the values are successive iterations (the module docstring); False: independent samples
    (seeds)."""
    found = log_estimate(x, serial)
    if found is None:
        return None
    centre, se, df = found
    half = t_quantile(normal_quantile(0.5 + level / 2), df) * se
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def typical_ratio(x, fallback: float | None, serial: bool = True) -> float | None:
    """The ratio a verdict states for log-ratios x: the centre of their interval (exp of the trimmed
    mean), or `fallback` (the ratio of medians) where there are too few for an interval, as
    analysis/intervals.py states a measured ratio; a prediction compared with one uses this too."""
    found = log_estimate(x, serial)
    return fallback if found is None else math.exp(found[0])
