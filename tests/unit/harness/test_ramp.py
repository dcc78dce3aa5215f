"""The drift ramp of a metric's history (bench/check/ramp.py): the covariance of the levels is the variance of
the steps their paths share, and the ramp's z is large only where the levels climb from its start."""
from dataclasses import dataclass, field

import numpy as np
import pytest

from rlbench.check.ramp import covariance, ramps


@dataclass
class P:  # the two fields of bench/check/history.py Point that the ramp reads
    level: float
    path: dict = field(default_factory=dict)


def test_covariance_is_the_variance_of_the_shared_steps():
    chain = [P(1.0, {0: 0.1}), P(1.0, {0: 0.1, 1: 0.2}), P(1.0, {0: 0.1, 1: 0.2, 2: 0.3})]
    assert covariance(chain) == pytest.approx(np.array([[0.1, 0.1, 0.1], [0.1, 0.3, 0.3], [0.1, 0.3, 0.6]]))
    siblings = [P(1.0, {0: 0.1}), P(1.0, {1: 0.2})]  # each against the anchor: independent
    assert covariance(siblings) == pytest.approx(np.diag([0.1, 0.2]))


def chain(levels: list[float], var: float = 1e-4) -> list[P]:
    """An anchor and a chain of commits at `levels` (each step measured with variance `var`)."""
    return [P(1.0)] + [P(level, {j: var for j in range(i + 1)}) for i, level in enumerate(levels)]


def test_a_flat_history_has_no_ramp_and_a_climb_has_one_from_where_it_starts():
    flat = ramps(chain([1.0] * 8), positions=8)
    assert flat and all(abs(r.z) < 1e-6 for r in flat)
    climb = ramps(chain([1.0] * 4 + [1.02, 1.04, 1.06, 1.08]), positions=8)
    best = max(climb, key=lambda r: r.z)
    assert best.start == 5 and best.z > 3 and best.slope == pytest.approx(np.log(1.02), rel=0.05)
    assert ramps([P(1.0)], positions=4) == []  # the anchor alone
