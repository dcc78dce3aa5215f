"""The suite's two test processes (`pytest -n 2 --dist loadgroup`, tests/conftest.py) keep each file, and the
files that share a run, in one process, so a module- or session-scoped run is made once. pytest-xdist marks a
grouped test by suffixing its node id in the worker with `@<group>`; where a pytest release stops reading
that field (9.2 with pytest-xdist 3.8) the groups are silently ignored and every shared run is made twice."""
from __future__ import annotations

import os

import pytest


def test_this_file_runs_as_one_group(request):
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not request.config.getvalue("loadgroup"):
        pytest.skip("only under pytest -n N --dist loadgroup")
    assert request.node.nodeid.endswith("@test_suite_groups.py"), request.node.nodeid


def test_the_groups_are_dealt_in_the_collections_order(request):
    """pytest-xdist would deal the groups by their number of tests, most first (a file of 100 quick tests
    before the GPU command's 3-minute rehearsal), undoing conftest.py's longest-first order; conftest.py
    keeps the collection's order."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        pytest.skip("only under pytest -n N")
    assert request.config.getoption("loadscopereorder") is False
