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
    """The run's processes still alive GONE_WITHIN_S after `since` (the run's end)."""
    deadline = since + GONE_WITHIN_S
    while (left := procs.marked(mark, var=MARK)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return procs.describe(left)


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
    on an accelerator (core/devices/starting.py)."""
    proc, mark = start(tmp_path, "run.iterations=100000", env={"RLBENCH_START": method})
    wait_for_iterations(proc, tmp_path)
    proc.kill()
    proc.wait()
    assert left_after(mark, time.monotonic()) == []
    _, err = proc.communicate(timeout=60)
    res = schema.load_cell(only_run(tmp_path) / "sync")
    assert res["status"] == "interrupted" and len(res["iterations"]) >= 2, err[-3000:]  # saved what it measured


@pytest.fixture
def loaded_machine():
    """About ten runnable processes on the machine beside the test's run (a load average near 10 on 2 cores,
    as a busy shared machine had when fork servers and resource trackers outlived a killed run by minutes):
    busy loops in a session of their own, ended after the test."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(HOGS)]
    yield hogs
    for h in hogs:
        h.kill()
        h.wait()


HOGS = 8  # busy loops beside the run: with its own processes, about ten runnable on the machine


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_killed_run_on_a_loaded_machine_leaves_nothing_and_no_fork_server(tmp_path, method, loaded_machine):
    """SIGKILL to `rlbench run` while the machine is loaded: within GONE_WITHIN_S nothing of the run is left,
    its fork servers (each dies with its client by the parent-death signal, however many copies of the
    client's life line are still open in processes it forked that have not let go of it yet) and resource
    trackers included."""
    proc, mark = start(tmp_path, "run.iterations=100000", env={"RLBENCH_START": method})
    wait_for_iterations(proc, tmp_path)
    assert all(h.poll() is None for h in loaded_machine)  # still loading it when the run is killed
    proc.kill()
    proc.wait()
    left = left_after(mark, time.monotonic())
    assert left == [], (left, os.getloadavg())


def test_a_fork_server_dies_with_its_client_whoever_holds_its_life_line(tmp_path):
    """A fork server started as a fork of its client (starting._fork_server), a process it forked still
    holding the client's life line (as one does until it lets go of it, starting.detach): the client killed,
    the server is gone at once (it lived until that process let go: minutes, on a loaded machine)."""
    probe = tmp_path / "probe.py"
    probe.write_text(SERVER_PROBE)
    client = subprocess.Popen([sys.executable, str(probe)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True, env=clean_env())
    _STARTED.append(client)
    server, child = (int(v) for v in client.stdout.readline().split())
    assert procs.parent_pid(server) == client.pid and procs.parent_pid(child) == server
    os.kill(client.pid, signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    while procs.parent_pid(server) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs.parent_pid(server) is None
    try:
        os.kill(child, signal.SIGKILL)  # the holder of the life line, which no longer keeps anything alive
    except ProcessLookupError:
        pass


# The client: a fork server forked from it, a process of the server's that keeps the client's life line open
# (never detaches) and sleeps; prints their pids and waits to be killed.
SERVER_PROBE = """
import multiprocessing as mp, os, sys, time
from rlbench.core.devices import starting

def hold():
    time.sleep(600)

if __name__ == "__main__":
    starting._fork_server()  # nothing preloaded: the server's life, not its imports, is what is tested
    p = mp.get_context("forkserver").Process(target=hold, daemon=False)
    p.start()
    print(starting.server_pid(), p.pid, flush=True)
    time.sleep(600)
"""


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
    (core/devices/starting.py)."""
    run = [p for p in procs.marked(mark, var=MARK) if b"resource_tracker" not in _cmdline(p)]
    cells = [p for p in run if p != proc.pid and p in procs.group_members(p)]
    members = [p for c in cells for p in procs.group_members(c) if p != c and p in run]
    return [p for p in members if not (b"multiprocessing.forkserver" in _cmdline(p) and procs.parent_pid(p) in cells)]


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""
