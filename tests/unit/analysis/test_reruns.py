"""Repeated runs of one config against their own intervals (analysis/reruns.py, `rlbench compare RUN RUN
[RUN ...]`): runs that differ only by their iterations' noise agree; runs shifted by a per-run offset their
intervals cannot see are flagged, with the between-run spread, widened words and the pooled ratio."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from rlbench.analysis import reruns
from rlbench.analysis.data import CellData, RunData
from rlbench.reports.comparison import across_text, agreement


def _cell(name: str, tpspd: list[float]) -> CellData:
    its = [{"iteration": k, "tpspd": v} for k, v in enumerate(tpspd)]
    return CellData(name, Path(name), {"cell": name, "iterations": its, "config": {},
                                       "aggregates": {"tpspd": {"median": statistics.median(tpspd)}}})


def _run(rng, ratio: float, n: int = 16, noise: float = 0.03) -> RunData:
    """A run of a sync cell (TPSPD drifting over its iterations) and an async cell at `ratio` of it, paired
    iteration by iteration with independent noise."""
    sync = 1000 * np.exp(np.cumsum(rng.normal(0, 0.05, n)))
    other = sync * ratio * np.exp(rng.normal(0, noise, n))
    cells = [_cell("sync", list(sync)), _cell("periodic_async", list(other))]
    return RunData(Path("run"), "ablation", "run", "sync", cells)


def test_runs_that_differ_only_by_their_noise_agree():
    rng = np.random.default_rng(0)
    [a] = reruns.across([_run(rng, 0.8) for _ in range(6)])
    assert (a.cell, a.reference) == ("periodic_async", "sync")
    assert not a.differ and a.p > 0.05
    assert set(a.words) == {"loses"}
    assert a.pooled.low < 0.8 < a.pooled.high and a.pooled.outcome == "loses"
    assert "differ no more than their intervals allow" in agreement(a)


def test_a_per_run_offset_is_flagged_and_widens_the_words():
    """Each run's ratio moved by a per-run factor (sd 15%) that no iteration of the run sees: the test
    finds it, tau is of its size, and widened by tau no run can call the comparison on its own."""
    rng = np.random.default_rng(1)
    runs = [_run(rng, 1.0 * math.exp(rng.normal(0, 0.15)), n=24, noise=0.01) for _ in range(8)]
    [a] = reruns.across(runs)
    assert a.differ and a.p < 0.001
    assert 0.07 < a.tau < 0.3
    assert len(set(a.words)) > 1  # one run's word alone would mislead
    assert set(a.widened_words) <= {"even"}
    for r in a.runs:  # widening keeps the centre and only grows the interval
        wide = r.widened(a.tau)
        assert wide.value == r.ratio.value and wide.low < r.ratio.low and wide.high > r.ratio.high
    text = " ".join(" ".join(across_text([a], len(runs))).split())  # the wrapped lines as one
    assert "one run's word needs another run" in text and "Widened by it" in text


def test_a_run_too_short_for_an_interval_is_shown_but_not_tested():
    rng = np.random.default_rng(2)
    runs = [_run(rng, 0.8), _run(rng, 0.8, n=3)]
    [a] = reruns.across(runs)
    assert a.words == ["loses", "too few"]
    assert a.q is None and "no test of their spread" in agreement(a)


def test_cells_missing_from_a_run_are_left_out():
    rng = np.random.default_rng(3)
    short = _run(rng, 0.8)
    short.cells = short.cells[:1]
    assert reruns.across([_run(rng, 0.8), short]) == []


@pytest.mark.parametrize("k", [2, 5])
def test_pooled_is_the_weighted_mean_without_a_between_run_term(k):
    rng = np.random.default_rng(4)
    [a] = reruns.across([_run(rng, 0.9) for _ in range(k)])
    if a.tau == 0:
        w = [1 / r.se ** 2 for r in a.runs]
        assert math.log(a.pooled.value) == pytest.approx(sum(wi * r.y for wi, r in zip(w, a.runs)) / sum(w))
