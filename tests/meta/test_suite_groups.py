"""The suite's two test processes (`pytest -n 2 --dist loadgroup`, tests/conftest.py) keep each file, and the
files that share a run, in one process, so a module- or session-scoped run is made once. pytest-xdist marks a
grouped test by suffixing its node id in the worker with `@<group>`; where a pytest release stops reading
that field (9.2 with pytest-xdist 3.8) the groups are silently ignored and every shared run is made twice.
What a user would notice: the README's test command taking minutes longer (the shared runs made in both
test processes), with nothing failing."""
from __future__ import annotations

import ast
import os

import conftest
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


def _fixture(f: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in f.decorator_list)


def _session_scoped(f: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and any(k.arg == "scope" and getattr(k.value, "value", None) == "session"
                                               for k in d.keywords) for d in f.decorator_list)


def test_the_files_that_share_a_session_run_are_one_group():
    """A file that reads one of conftest.py's session-scoped runs from outside the run's group makes the run
    again in the other test process (the async ladder, 34 s, was made twice so)."""
    tests = conftest.TESTS
    tree = ast.parse((tests / "conftest.py").read_text())
    runs = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and _session_scoped(f)}
    runs -= {"tiny_config_path"}  # a path, no run
    users: dict[str, set[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and (node.name.startswith("test_") or _fixture(node)):
                for arg in node.args.args:
                    if arg.arg in runs:
                        users.setdefault(arg.arg, set()).add(path.name)
    assert set(users) == runs, runs - set(users)  # each is read somewhere (the check reads the right names)
    groups = {run: {conftest._SHARED_RUNS.get(f, f) for f in files} for run, files in users.items()}
    assert all(len(g) == 1 for g in groups.values()), groups
