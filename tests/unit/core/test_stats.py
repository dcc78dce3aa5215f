"""The statistics every verdict uses (core/stats.py) are computed with scipy.special and numpy, not
scipy.stats (whose import costs every command that reads results over a second): they must equal
scipy.stats' own, which the tests may import."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from rlbench.analysis.accuracy import interval, t_interval
from rlbench.core import stats
from rlbench.experiments.regime.analysis import spearman


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 10, 13, 17, 40])
def test_the_trimmed_mean_is_scipys(n):
    x = np.random.default_rng(n).lognormal(size=n)
    mean, se = stats.trimmed(x)
    assert mean == pytest.approx(scipy_stats.trim_mean(x, stats.TRIM), rel=1e-12)
    assert math.isinf(se) == (n < 3)


@pytest.mark.parametrize("df", [1, 2, 3, 5, 9, 30, 200])
@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995])
def test_the_quantiles_are_scipys(df, p):
    assert stats.student_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-10)
    assert stats.normal_quantile(p) == pytest.approx(scipy_stats.norm.ppf(p), rel=1e-12)
    z = scipy_stats.norm.ppf(p)
    assert stats.t_quantile(z, df) == pytest.approx(scipy_stats.t.ppf(scipy_stats.norm.cdf(z), df), rel=1e-10)


@pytest.mark.parametrize("k, n", [(0, 10), (1, 10), (5, 10), (10, 10), (37, 64), (3, 500)])
def test_the_wilson_interval_is_scipys(k, n):
    ci = scipy_stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    assert stats.wilson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)
    m, low, high, method = interval([k / n], n)
    assert (low, high) == pytest.approx((ci.low, ci.high), abs=1e-12) and method.startswith("Wilson")


def test_the_seed_interval_is_scipys():
    values = [0.41, 0.47, 0.39, 0.52]
    m, low, high = t_interval(values)
    half = scipy_stats.t.ppf(0.975, 3) * np.std(values, ddof=1) / 2
    assert (low, high) == pytest.approx((m - half, m + half), rel=1e-12)


def test_spearman_is_scipys_with_ties_and_gaps():
    a = pd.Series([1.0, 2.0, 2.0, 5.0, None, 3.0, 8.0])
    b = pd.Series([0.3, 0.1, 0.4, 0.4, 0.9, "x", 0.7])
    both = pd.DataFrame({"a": a, "b": pd.to_numeric(b, errors="coerce")}).dropna()
    assert spearman(a, b) == pytest.approx(scipy_stats.spearmanr(both["a"], both["b"]).statistic, rel=1e-12)
    assert spearman(pd.Series([1.0, 1.0]), pd.Series([2.0, 3.0])) is None
