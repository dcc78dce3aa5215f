"""The tests' warm interpreter (support/warm.py): a command run in a fork of it behaves as in a fresh
interpreter. A whole run's samples and weights, warm against fresh: test_cli_run.py
test_same_seed_same_samples."""
import os

from conftest import TINY
from support.cli import rlbench
from support.warm import inherited, same_start, warm


def test_only_rlbench_variables_may_differ_from_the_warm_interpreters_start():
    started = {"PATH": "/bin", "RLBENCH_CACHE": "/c", "OMP_NUM_THREADS": "2"}
    assert same_start(dict(started), started)
    assert same_start({**started, "RLBENCH_FAULT": "rollout_exit:2", "PYTEST_CURRENT_TEST": "x"}, started)
    assert same_start({k: v for k, v in started.items() if k != "RLBENCH_CACHE"}, started)
    assert not same_start({**started, "OMP_NUM_THREADS": "1"}, started)  # read when torch is imported
    assert not same_start({k: v for k, v in started.items() if k != "OMP_NUM_THREADS"}, started)
    assert not same_start({**started, "PYTHONPATH": "/x"}, started)


def test_a_refusal_is_the_same_warm_and_fresh(tmp_path):
    """Exit code, streams and nothing written: the same in a fork of the warm interpreter as fresh; the
    fork sees the environment and working directory it is given, not the warm interpreter's."""
    args = ("run", "--config", TINY, "--set", "rollout.nope=1", "--out", tmp_path / "out")
    env = {**inherited(), "RLBENCH_TEST_MARK": "here"}
    warm_done = warm().run([str(a) for a in args], env, timeout=60)
    assert warm_done is not None  # the warm interpreter ran it
    fresh = rlbench(*args, env={"RLBENCH_TEST_MARK": "here"}, fresh=True, timeout=60)
    assert (warm_done.returncode, warm_done.stdout, warm_done.stderr) == (fresh.returncode, fresh.stdout,
                                                                          fresh.stderr)
    assert fresh.returncode == 2 and "rollout.nope" in fresh.stderr
    assert not (tmp_path / "out").exists()

    (tmp_path / "afile").write_text("")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        done = warm().run(["run", "--config", str(TINY), "--out", "afile/x"], env, timeout=60)
    finally:
        os.chdir(cwd)
    assert done.returncode == 2 and f"under {tmp_path / 'afile'}: Not a directory" in done.stderr


def test_an_environment_read_at_start_goes_to_a_fresh_interpreter():
    """Not the warm interpreter's start: not run there (support/cli.py then starts a fresh one)."""
    assert warm().run(["--help"], {**inherited(), "RLBENCH_TEST_OTHER": "1", "NOT_READ_BY_RLBENCH": "1"},
                      timeout=60) is None
