"""The checks before a run that need torch and transformers run in a process of the cells' context
(bench/run/around.py `in_process`): what they raise reaches `rlbench run` as if they had run there.
That `rlbench run`'s own process then imports neither: tests/test_limits.py (a refusal from that process)."""
import multiprocessing

import pytest

from rlbench.core.errors import UserError
from rlbench.run import around


@pytest.fixture(scope="module")
def ctx():
    """spawn: a fresh interpreter (the fork server's is the same process code, with its imports done)."""
    return multiprocessing.get_context("spawn")


def test_a_refusal_there_is_the_same_refusal_here(ctx):
    """The UserError's message comes back whole; a check that passes returns nothing."""
    with pytest.raises(UserError) as refused:
        around.in_process(ctx, around.new_run_dir, "/proc/no-such-folder", "x")
    assert str(refused.value).startswith("--out /proc/no-such-folder: cannot create the run folder")
    assert around.in_process(ctx, around.raise_failed, {"cells": [{"name": "sync", "exit_code": 0}]}) is None


def test_a_crash_there_is_not_taken_for_bad_input(ctx):
    """Anything but a UserError (a bug, its traceback printed by that process) fails the run, not exit 2."""
    with pytest.raises(RuntimeError, match=r"the checks before the run failed \(exit code 1; see above\)"):
        around.in_process(ctx, around.raise_failed, {"cells": "not a list of cells"})
