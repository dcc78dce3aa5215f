"""Response lengths drawn for a step read from a framework's log (core/costmodel/fromlog.py response_lengths):
the logged mean and maximum kept, the same lengths for the same seed, a seed only reordering them."""
import pytest

from rlbench.core.costmodel.fromlog import response_lengths


def test_the_logged_mean_and_maximum_are_kept():
    lens = response_lengths(64, 200.0, 1024, 64, seed=0)
    assert len(lens) == 64 and max(lens) == 1024 and min(lens) >= 1
    assert sum(lens) / len(lens) == pytest.approx(200.0, rel=0.05)


def test_a_seed_reorders_the_same_lengths():
    a, b = response_lengths(32, 100.0, 400, 32, seed=1), response_lengths(32, 100.0, 400, 32, seed=2)
    assert a == response_lengths(32, 100.0, 400, 32, seed=1)
    assert a != b and sorted(a) == sorted(b)


def test_without_a_maximum_the_lengths_still_spread_around_the_mean():
    lens = response_lengths(50, 80.0, None, 50, seed=0)
    assert min(lens) < 80 < max(lens) and sum(lens) / 50 == pytest.approx(80.0, rel=0.05)
