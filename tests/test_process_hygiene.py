"""Nothing left behind: after a run completes, fails, is killed or interrupted, no process it started is
alive 10 s later. Processes are found by walking /proc for a variable only this test's run inherits, not
by trusting any shutdown call."""
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import TINY, default_sigint
from support.cli import argv, clean_env, only_run

from rlbench.core.devices import procs
from rlbench.core.results import schema

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's"),
              pytest.mark.e2e]
MARK = "RLBENCH_TEST_MARK"
GONE_WITHIN_S = 10.0
# At most this much longer for processes the machine kept waiting for a core (left_after): a process that
# hangs sleeping gets none of it, one spinning beside other work at most this.
QUEUED_AT_MOST_S = 60.0


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _end_what_a_test_started():
    """A test that fails before it ends its run (100,000 iterations) must not leave it running beside the
    rest of the suite: its session is killed after the test, whatever the test did."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate(timeout=60)


def start(tmp_path, *sets: str, env: dict | None = None, report: bool = False):
    """`rlbench run` of the tiny config (sync: two colocated worker processes and a process group) in a
    session of its own, as a terminal would start it (SIGINT at its default: a foreground job gets
    Ctrl-C); -> (process, mark)."""
    mark = uuid.uuid4().hex
    overrides = [a for s in ["engine.schedule=sync", *sets] for a in ("--set", s)]
    proc = subprocess.Popen(argv("run", "--config", TINY, "--out", tmp_path, "--no-progress",
                                 "--report" if report else "--no-report", "--ablation", "none", *overrides),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**clean_env(), MARK: mark, **(env or {})}, preexec_fn=default_sigint)
    _STARTED.append(proc)
    return proc, mark


def left_after(mark: str, since: float) -> list[str]:
    """The run's processes still alive GONE_WITHIN_S after `since` (the run's end), the seconds the machine
    kept them waiting for a core not counted: on two cores shared with other work an ending process can
    wait seconds to be scheduled at all, which says nothing about the run. Those seconds are each
    process's run-queue wait (/proc/PID/schedstat), the longest of them added to the deadline, up to
    QUEUED_AT_MOST_S; a process that hangs asleep waits on no queue and gets none."""
    first: dict[int, float] = {}
    extra = 0.0
    while left := procs.marked(mark, var=MARK):
        for pid in left:
            now_waited = _queued_s(pid)
            first.setdefault(pid, now_waited)
            extra = max(extra, min(QUEUED_AT_MOST_S, now_waited - first[pid]))
        if time.monotonic() >= since + GONE_WITHIN_S + extra:
            break
        time.sleep(0.1)
    return procs.describe(left)


def _queued_s(pid: int) -> float:
    """Seconds process pid has spent runnable but not running (0 where the kernel does not say)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def wait_for_iterations(proc, tmp_path, n: int = 2) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        its = list(tmp_path.glob("*/sync/" + schema.ITERATIONS))
        if its and len(its[0].read_text().splitlines()) >= n:
            return
        time.sleep(0.3)
    raise AssertionError(f"no {n} iterations: {proc.communicate()[1][-3000:]}")


def test_completed_run_leaves_nothing(tmp_path):
    proc, mark = start(tmp_path)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert left_after(mark, time.monotonic()) == []


def test_dead_colocated_rank_keeps_measured_iterations_and_leaves_nothing(tmp_path):
    """A colocated rank dies at iteration 2 (RLBENCH_FAULT): exit 3 naming it, iterations 0-1 kept in a
    'failed' results.json, no process of the run left (the dead rollout worker's case: test_cli_run.py)."""
    proc, mark = start(tmp_path, env={"RLBENCH_FAULT": "trainer_exit:2"})
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 3, err[-3000:]
    assert left_after(mark, time.monotonic()) == []
    assert "died while running iteration 2" in err
    res = schema.load_cell(only_run(tmp_path) / "sync")
    assert res["status"] == "failed" and "died" in res["error"]
    assert [it["iteration"] for it in res["iterations"]] == [0, 1]


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_killed_run_leaves_nothing(tmp_path, method):
    """SIGKILL to `rlbench run` itself: no cleanup code of it runs; its cell learns by the parent-death
    signal, stops like a Ctrl-C and ends its process group. On CPU the cell and its workers are forked by
    fork servers (its parent is `rlbench run`'s server, which ends with it); spawn is how processes start
    on an accelerator (bench/core/devices/starting.py)."""
    proc, mark = start(tmp_path, "run.iterations=100000", env={"RLBENCH_START": method})
    wait_for_iterations(proc, tmp_path)
    proc.kill()
    proc.wait()
    assert left_after(mark, time.monotonic()) == []
    _, err = proc.communicate(timeout=60)
    res = schema.load_cell(only_run(tmp_path) / "sync")
    assert res["status"] == "interrupted" and len(res["iterations"]) >= 2, err[-3000:]  # saved what it measured


def test_ctrl_c_exits_130_keeps_iterations_and_leaves_nothing(tmp_path):
    """SIGINT to the process group, as a terminal's Ctrl-C sends it: exit 130, the cell's measured
    iterations kept with status interrupted, the report still written, no process left."""
    proc, mark = start(tmp_path, "run.iterations=100000", report=True)
    wait_for_iterations(proc, tmp_path)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)  # saving results and writing the report; slow on a loaded machine
    assert proc.returncode == 130, err[-3000:]
    assert left_after(mark, time.monotonic()) == []
    assert "interrupted" in err
    run_dir = only_run(tmp_path)
    res = schema.load_cell(run_dir / "sync")
    assert res["status"] == "interrupted" and len(res["iterations"]) >= 2
    assert (run_dir / "report.html").is_file()


def test_killed_worker_ends_the_run_and_leaves_nothing(tmp_path):
    """The issue's vLLM case with the built-in engine: one worker killed from outside."""
    proc, mark = start(tmp_path, "run.iterations=100000")
    wait_for_iterations(proc, tmp_path)
    workers = worker_pids(proc, mark)  # the cell's colocated ranks
    assert len(workers) == 2, procs.describe(procs.marked(mark, var=MARK))
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, err[-3000:]
    # The driver sees the death, or first the peer rank's failed collective ("failed while running").
    assert re.search(r"worker colocated\d died|colocated\d failed while", err), err[-3000:]
    assert left_after(mark, time.monotonic()) == []


def worker_pids(proc, mark: str) -> list[int]:
    """The worker processes of the run `proc` started: the members of its cell's process group other than
    the cell, the resource trackers and, on CPU, the cell's fork server that forks the workers
    (bench/core/devices/starting.py)."""
    run = [p for p in procs.marked(mark, var=MARK) if b"resource_tracker" not in _cmdline(p)]
    cells = [p for p in run if p != proc.pid and p in procs.group_members(p)]
    members = [p for c in cells for p in procs.group_members(c) if p != c and p in run]
    return [p for p in members if not (b"multiprocessing.forkserver" in _cmdline(p) and procs.parent_pid(p) in cells)]


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""
