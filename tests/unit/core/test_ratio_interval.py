"""The one estimator of a ratio and its interval (core/ratio_interval.py, analysis/intervals.py):
the value printed is the centre of the interval printed with it; the interval grows with the serial
correlation of successive iterations; too few samples give no word but "too few"."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from rlbench.analysis import intervals
from rlbench.analysis.data import CellData
from rlbench.analysis.verdict import Comparison
from rlbench.core import ratio_interval as ri
from rlbench.core.stats import trimmed
from rlbench.reports.verdict_text import comparison_sentence


def _cell(name: str, tpspd: list[float]) -> CellData:
    its = [{"iteration": k, "tpspd": v} for k, v in enumerate(tpspd)]
    return CellData(name, Path(name), {"cell": name, "iterations": its, "config": {},
                                       "aggregates": {"tpspd": {"median": statistics.median(tpspd)}}})


def test_stalled_iterations_value_is_the_centre_of_its_interval_and_the_word_agrees():
    """Sync at 100..1000, async 1.05x sync except two stalled iterations: the ratio of medians (0.86x) and the
    typical paired ratio (1.05x) disagree; the one printed is the paired one, inside its own interval."""
    rng = np.random.default_rng(3)
    sync = [100.0 * k for k in range(1, 16)]
    fast = [1.05 * s * math.exp(rng.normal(0, 0.005)) for s in sync]
    fast[12], fast[13] = 50.0, 60.0  # stalled (15 iterations: two cut at each end, ratio_interval.trim_count)
    medians = statistics.median(fast) / statistics.median(sync)
    assert medians < 0.9  # what the tables' speedup column says
    r = intervals.paired(_cell("periodic_async", fast), _cell("sync", sync))
    assert r.low is not None and r.low <= r.value <= r.high
    assert math.isclose(math.log(r.value) - math.log(r.low), math.log(r.high) - math.log(r.value))
    assert 1.03 < r.value < 1.07 and r.outcome == intervals.WINS
    c = Comparison("periodic_async", "sync", r.value, 1.0, 0.5, interval=r)
    said = comparison_sentence(c)
    assert said.startswith(f"periodic_async {r.value:.2f}× sync's TPSPD (95% interval {r.low:.2f}–{r.high:.2f}×")
    assert "wins here" in said
    row = intervals.columns(r, "measured", "measured_speedup")  # what the speedup table holds
    assert intervals.from_columns(row, "measured_speedup", "measured") == r


def test_fixed_seed_case():
    """Ten log-ratios of a fixed draw: the value, the correlation assumed and the interval, to 4 digits."""
    x = np.random.default_rng(0).normal(0.05, 0.03, 10)
    value, low, high = ri.ratio_interval(x)
    assert ri.trim_count(10) == 1 and math.isclose(value, math.exp(trimmed(x, 1)[0]))
    assert ri.serial_rho(x) == ri.RHO_FLOOR  # ten values cannot show a correlation above the floor
    from scipy import stats  # by hand: rho 0.5 gives df (10 - 2 - 1) x 0.75 / 1.25 = 4.2

    half = stats.t.ppf(0.975, 4.2) * trimmed(x, 1)[1] * math.sqrt(ri.inflation(10, 0.5))
    assert (low, high) == pytest.approx((value * math.exp(-half), value * math.exp(half)))


def test_trimming_starts_where_it_costs_no_power():
    """20% of the values beyond the first 5: none below 10, one at each end from 10, two from 15; the degrees
    of freedom grow with every value up to 9 (20% of every n cut one at each end at 5: df 3 at n = 4, 2 at 5)."""
    assert [ri.trim_count(n) for n in (4, 5, 9, 10, 14, 15, 20, 105)] == [0, 0, 0, 1, 1, 2, 3, 20]
    dfs = [n - 2 * ri.trim_count(n) - 1 for n in range(4, 10)]
    assert dfs == [3, 4, 5, 6, 7, 8]


def test_a_short_strongly_correlated_series_gets_the_widest_interval_not_none():
    """"too few" depends on the count alone: 4 values that look strongly correlated get t on MIN_DF."""
    x = [0.01, 0.02, 0.03, 0.04, 0.05]  # a ramp: lag-1 correlation 0.84, (5 - 1) x 0.17 = 0.7 df (was: none)
    centre, se, df = ri.log_estimate(x)
    assert df == ri.MIN_DF and ri.ratio_interval(x) is not None
    assert ri.ratio_interval(x[:3]) is None


def test_inflation_is_exact_at_zero_and_grows_with_rho():
    assert ri.inflation(10, 0.0) == 1.0
    f = [ri.inflation(10, r) for r in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert all(a < b for a, b in zip(f, f[1:]))
    # AR(1), n = 6, rho = 0.5: Var(mean) n / var = 2.344, E[s^2] / var = 0.731 (by hand)
    assert ri.inflation(6, 0.5) == pytest.approx(2.3438 / 0.73125, rel=1e-3)


def test_interval_widens_with_correlation_and_narrows_with_more_iterations():
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 0.03, 12)
    independent = ri.ratio_interval(x, serial=False)
    serial = ri.ratio_interval(x)
    assert serial[2] / serial[1] > independent[2] / independent[1]  # the assumed correlation widens it
    trend = np.sort(x)  # the same values in a smooth order: strongly correlated neighbours
    assert ri.lag1(trend) > ri.RHO_FLOOR
    smooth = ri.ratio_interval(trend)
    assert smooth is None or smooth[2] / smooth[1] > serial[2] / serial[1]
    y = np.tile(x, 4)[:40] + rng.normal(0, 0.001, 40)
    assert ri.ratio_interval(y)[2] / ri.ratio_interval(y)[1] < serial[2] / serial[1]


def test_independent_samples_give_the_yuen_interval():
    """serial=False (seeds): the trimmed mean with the Tukey-McLaughlin error and t on n - 2g - 1 df."""
    from scipy import stats

    x = [0.02, 0.05, -0.01, 0.03, 0.04, 0.00, 0.06, 0.01, 0.02, 0.05, 0.03]
    value, low, high = ri.ratio_interval(x, serial=False)
    d, se = trimmed(x, 1)  # 11 values: one cut at each end (ratio_interval.trim_count)
    t = stats.t.ppf(0.975, len(x) - 2 * 1 - 1)
    assert (low, high) == pytest.approx((math.exp(d - t * se), math.exp(d + t * se)))


def test_too_few_samples_give_no_interval_and_the_word_says_so():
    assert ri.ratio_interval([0.1, 0.1, 0.12]) is None
    r = intervals.over_seeds([0.9, 0.91, 0.9], 0.905)
    assert r.low is None and r.value == 0.905 and r.outcome == intervals.TOO_FEW
    c = Comparison("periodic_async", "sync", 1.3, 1.2, 0.5, interval=intervals.Ratio(1.3, n=2))
    assert "too few iterations to call" in comparison_sentence(c)
