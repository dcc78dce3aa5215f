"""Process hygiene helpers (core/devices/procs.py) with ordinary child processes: parent-death signal, process
groups, finding a run's processes in /proc. What vLLM's engine cores rely on, without vLLM."""
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from conftest import default_sigint
from rlbench.core.devices import procs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")

# A parent that starts a grandchild (sleeping, marked by the caller's variable) and prints its pid;
# with_pdeathsig: the grandchild asks to die with its parent.
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
    print(child.pid, flush=True)
    time.sleep(600)
""")
CHILD = "import time, signal\n{setup}\ntime.sleep(600)"
WITH_PDEATHSIG = "import multiprocessing\nfrom rlbench.core.devices import procs\nprocs.die_with_parent(signal.SIGKILL)"


def start_family(child_setup: str, mark: str, new_group: bool = False):
    env = {**os.environ, "TEST_MARK": mark}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD.format(setup=child_setup)],
                              stdout=subprocess.PIPE, text=True, env=env, start_new_session=new_group)
    child = int(parent.stdout.readline())
    return parent, child


def wait_gone(pid_list_fn, timeout_s=10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := pid_list_fn()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_child_dies_with_its_parent():
    mark = uuid.uuid4().hex
    parent, child = start_family(WITH_PDEATHSIG, mark)
    time.sleep(1.0)  # the child has asked for the signal
    assert sorted(procs.marked(mark, var="TEST_MARK")) == sorted([parent.pid, child])
    parent.kill()
    parent.wait()
    assert wait_gone(lambda: procs.marked(mark, var="TEST_MARK")) == []


def test_without_the_signal_the_orphan_lingers_and_the_group_kill_ends_it():
    """The failure the issue saw (an engine core re-parented to PID 1) and the backstop that ends it."""
    mark = uuid.uuid4().hex
    parent, child = start_family("pass", mark, new_group=True)
    parent.kill()
    parent.wait()
    time.sleep(0.5)
    assert procs.marked(mark, var="TEST_MARK") == [child]  # orphaned, still alive
    assert procs.group_members(parent.pid) == [child]  # but still in its parent's process group
    assert procs.end_group(parent.pid, grace_s=0.2) == []
    assert procs.marked(mark, var="TEST_MARK") == []


def test_sigterm_to_a_group_leader_becomes_sigint_to_its_group():
    code = textwrap.dedent("""
        import signal, subprocess, sys, time
        from rlbench.core.devices import procs
        procs.lead_own_group()
        procs.stop_group_on_sigterm()
        child = subprocess.Popen([sys.executable, "-c", "import time\\ntry:\\n time.sleep(600)\\n"
                                  "except KeyboardInterrupt:\\n print('child interrupted', flush=True)"])
        print(child.pid, flush=True)
        try:
            time.sleep(600)
        except KeyboardInterrupt:
            child.wait()
            print("leader interrupted", flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    p.stdout.readline()
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    assert "child interrupted" in out and "leader interrupted" in out


def test_a_stop_that_takes_too_long_is_cut_short_by_killing_the_group():
    """The polite stop (SIGINT to the group) has hard_stop_s; a leader still closing and a child that
    ignores SIGINT are then killed, so nothing outlives the stop by much more than hard_stop_s."""
    mark = uuid.uuid4().hex
    code = textwrap.dedent("""
        import signal, subprocess, sys, time
        from rlbench.core.devices import procs
        procs.lead_own_group()
        procs.stop_group_on_sigterm(hard_stop_s=1.0)
        child = subprocess.Popen([sys.executable, "-c", "import signal, time\\n"
                                  "signal.signal(signal.SIGINT, signal.SIG_IGN)\\ntime.sleep(600)"])
        print(child.pid, flush=True)
        try:
            time.sleep(600)
        except KeyboardInterrupt:
            print("closing slowly", flush=True)
            time.sleep(600)  # a close that would take far too long
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint,
                         env={**os.environ, "TEST_MARK": mark})
    child = int(p.stdout.readline())
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.stdout.readline().strip() == "closing slowly"  # the polite stop began
    p.wait(timeout=10)
    assert p.returncode == -signal.SIGKILL and time.monotonic() - t0 < 5
    assert wait_gone(lambda: procs.marked(mark, var="TEST_MARK"), timeout_s=3) == []
    assert not os.path.exists(f"/proc/{child}") or procs.marked(mark, var="TEST_MARK") == []


def test_the_hard_stop_comes_even_while_the_stopping_process_holds_its_interpreter():
    """The polite stop stuck in one long call in C (it holds the interpreter's lock, so no thread of the
    process runs): the group is killed all the same, by the watchdog process (a timer thread waited for the
    lock, and a cell whose run was killed on a loaded machine outlived it)."""
    mark = uuid.uuid4().hex
    code = textwrap.dedent("""
        import time
        from rlbench.core.devices import procs
        procs.lead_own_group()
        procs.stop_group_on_sigterm(hard_stop_s=1.0)
        try:
            print("ready", flush=True)  # inside: a stop that comes as "ready" is written is caught all the same
            time.sleep(600)
        except KeyboardInterrupt:
            print("closing in C", flush=True)
            sum(range(10 ** 12))  # never lets go of the interpreter's lock
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint,
                         env={**os.environ, "TEST_MARK": mark})
    assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.stdout.readline().strip() == "closing in C"
    try:
        p.wait(timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL and time.monotonic() - t0 < 8
    assert wait_gone(lambda: procs.marked(mark, var="TEST_MARK"), timeout_s=5) == []
