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
