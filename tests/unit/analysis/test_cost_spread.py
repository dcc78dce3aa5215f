"""analysis/cost_spread.py: a regime point's cells must pay the same CPU for the same work; the spread
says where they did not, and the map's prediction sentence names those misses."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlbench.analysis.cost_spread import cpu_per_token, descheduled_pct, point_spread, spread_pct
from rlbench.analysis.data import CellData
from rlbench.experiments.regime.text import prediction_sentence


def _cell(name: str, train_cpu: float, roll_cpu: float, async_layout: bool, wall: float = 1.0) -> CellData:
    """Two measured iterations (1, 2) after one warm-up (0), 100 tokens and 40 response tokens each; every
    stage `wall` seconds long."""
    its = [{"iteration": k, "warmup": k == 0, "tokens": 100, "response_tokens": 40} for k in range(3)]
    trainer, roller = ("trainer0", "rollout0") if async_layout else ("colocated0", "colocated0")
    events = []
    for k in range(3):
        events += [{"worker": trainer, "stage": "update", "iteration": k, "start": 0, "end": wall, "cpu": train_cpu},
                   {"worker": roller, "stage": "rollout", "iteration": k, "start": 0, "end": wall, "cpu": roll_cpu},
                   {"worker": trainer, "stage": "queue_wait", "iteration": k, "start": 0, "end": 9, "cpu": 0.0},
                   {"worker": "driver", "stage": "update", "iteration": k, "start": 0, "end": 1, "cpu": 99.0}]
    return CellData(name, Path("."), {"iterations": its}, events=events)


def test_cpu_per_token_counts_measured_iterations_and_the_given_roles_only():
    c = _cell("a", train_cpu=2.0, roll_cpu=1.0, async_layout=True)
    assert cpu_per_token(c, ("update",), "tokens", ("trainer",)) == pytest.approx(4.0 / 200)
    assert cpu_per_token(c, ("rollout",), "response_tokens", ("rollout",)) == pytest.approx(2.0 / 80)
    assert cpu_per_token(c, ("rollout",), "response_tokens", ("trainer",)) is None


def test_spread_is_the_largest_ratio_minus_one():
    assert spread_pct([1.0, 1.2, None, 1.1]) == pytest.approx(20.0)
    assert spread_pct([1.0, None]) is None


def test_point_spread_flags_the_cell_that_ran_the_same_work_slower():
    sync = _cell("s", 2.0, 1.0, async_layout=False)
    barrier = _cell("b", 2.0, 1.0, async_layout=True)
    slow = _cell("a", 2.5, 1.8, async_layout=True)
    spread = point_spread(sync, barrier, slow)
    assert {k: spread[k] for k in ("train_cost_spread_pct", "rollout_cost_spread_pct")} == \
        pytest.approx({"train_cost_spread_pct": 25.0, "rollout_cost_spread_pct": 80.0})
    same = point_spread(sync, barrier, _cell("a", 2.0, 1.0, async_layout=True))
    assert same["train_cost_spread_pct"] == 0.0 and same["rollout_cost_spread_pct"] == 0.0


def test_descheduled_is_compute_wall_time_without_cpu_time():
    """A pinned worker that computes 1 CPU second in 1 s was never descheduled; in 2 s it waited half the time
    for its core. Waiting stages (queue_wait: 9 s without CPU here) do not count."""
    assert descheduled_pct(_cell("q", 1.0, 1.0, async_layout=True)) == pytest.approx(0.0)
    assert descheduled_pct(_cell("b", 1.0, 1.0, async_layout=True, wall=2.0)) == pytest.approx(50.0)
    busy = point_spread(_cell("s", 1.0, 1.0, False), _cell("b", 1.0, 1.0, True, wall=1.25),
                        _cell("a", 1.0, 1.0, True))
    assert busy["descheduled_pct"] == pytest.approx(20.0)


def test_a_miss_on_a_busy_machine_is_named_as_such():
    frame = _frame([{"point": "busy", "error_pct": -30.0, "train_cost_spread_pct": 1.0,
                     "rollout_cost_spread_pct": 2.0, "descheduled_pct": 32.0},
                    {"point": "ok", "error_pct": 2.0, "train_cost_spread_pct": 1.0, "rollout_cost_spread_pct": 2.0,
                     "descheduled_pct": 1.0}])
    text = prediction_sentence(frame)
    assert "1 of the 1 misses ran while other work held the cores" in text and "busy: 32%" in text
    assert "the model misses there" not in text


def _frame(rows):
    base = {"predicted_with_contention": None, "contention_error_pct": None}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_the_prediction_sentence_names_misses_whose_cells_drifted():
    frame = _frame([{"point": "hit", "error_pct": 3.0, "train_cost_spread_pct": 2.0, "rollout_cost_spread_pct": 1.0},
                    {"point": "drift", "error_pct": 30.0, "train_cost_spread_pct": 16.0, "rollout_cost_spread_pct": 80.0},
                    {"point": "model", "error_pct": -20.0, "train_cost_spread_pct": 3.0, "rollout_cost_spread_pct": 4.0}])
    text = prediction_sentence(frame)
    assert "within ±10% at 1 of 3 points" in text
    assert "1 of the 2 misses" in text and "drift: training +16%, rollout +80%" in text and "model:" not in text


def test_misses_without_drift_are_called_the_models():
    frame = _frame([{"point": "m", "error_pct": 25.0, "train_cost_spread_pct": 1.0, "rollout_cost_spread_pct": 2.0},
                    {"point": "h", "error_pct": 1.0, "train_cost_spread_pct": 1.0, "rollout_cost_spread_pct": 2.0}])
    assert "the model misses there" in prediction_sentence(frame)
