"""What a cell records outside its measured iterations (core/record/lifecycle.py): the age of a process, its
start-up phases, the peak memory of a process and its children, and the seconds a cell waited in the turn ring
(which start-up leaves out)."""
import subprocess
import sys
import threading
import time

import pytest

from rlbench.core.record import lifecycle
from rlbench.run.interleave import Pacer, Ring

# allocates and touches 200 MB, frees it, then says so and sleeps: its peak stays, its current RSS falls
BALLOON = ("import sys, time\nb = bytearray(200 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1\ndel b\n"
           "print('freed', flush=True)\ntime.sleep(30)\n")


def test_process_age_counts_from_the_start_of_the_interpreter():
    code = "import time; time.sleep(1.0); from rlbench.core.record import lifecycle; print(lifecycle.process_age_s())"
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 1.0 <= age < 30  # the sleep and the interpreter's own start, nothing from before it


def test_peak_memory_keeps_the_high_water_mark_and_adds_a_workers_children():
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time\n"
                               f"subprocess.Popen([sys.executable, '-c', {BALLOON!r}])\ntime.sleep(30)\n"])
    try:
        deadline = time.monotonic() + 60
        # until the child has touched all 200 MB (its peak grows while it does, the worker's own stays put)
        while time.monotonic() < deadline and (lifecycle.peaks({"rollout0": parent.pid}).get("rollout0") or 0) < \
                (lifecycle.peak_rss_mb(parent.pid) or 0) + 200:
            time.sleep(0.2)
        own = lifecycle.peak_rss_mb(parent.pid)
        assert own is not None and own < 100  # the worker itself stayed small
        assert lifecycle.peaks({"rollout0": parent.pid})["rollout0"] >= own + 200  # its child's 200 MB peak
        assert lifecycle.peaks({"driver": parent.pid})["driver"] == round(own, 1)  # the driver: its own only
    finally:
        for child in lifecycle._children(parent.pid):
            subprocess.run(["kill", "-9", str(child)])
        parent.kill()
        parent.wait()


def test_the_pacer_counts_the_seconds_a_cell_waited_for_others(tmp_path):
    """Start-up excludes the ring's waits: a cell set up after another waits for it, and that wait is counted."""
    first, second = Ring.create(tmp_path / "ring").register(0, ["a", "b"])
    p1, p2 = Pacer(first), Pacer(second)

    def slow_setup():
        p1.setup()
        time.sleep(0.5)  # cell a sets up; b must wait
        p1.ready()

    t = threading.Thread(target=slow_setup)
    t.start()
    p2.setup()
    t.join(10)
    assert p2.waited_s >= 0.4 and p1.waited_s < 0.4
    assert Pacer().waited_s == 0.0  # alone: never waits
    for p in (p1, p2):
        p.leave()


def test_start_up_phases_add_up_per_process_and_a_new_cell_starts_a_new_record():
    from rlbench.core.record.lifecycle import Phase

    lifecycle.begin_phases(own_process=False)  # a cell run in this (test) process: no imports phase
    with lifecycle.phase(Phase.WEIGHTS):
        time.sleep(0.05)
    with lifecycle.phase(Phase.WEIGHTS):  # a second model copy: counted too
        time.sleep(0.05)
    lifecycle.add_workers({"rollout0": {"imports": 0.5, "weights_in": 2.0}})
    got = lifecycle.by_process()
    assert set(got) == {"driver", "rollout0"} and "imports" not in got["driver"]
    assert 0.1 <= got["driver"]["weights_in"] < 5
    assert lifecycle.phase_totals(got)["weights_in"] == 2.0  # a phase takes as long as its slowest process
    lifecycle.begin_phases(own_process=True)  # started for the cell: its age so far is its imports
    assert lifecycle.by_process()["driver"]["imports"] == pytest.approx(lifecycle.process_age_s(), abs=1.0)
    assert list(lifecycle.by_process()) == ["driver"]


def _phases_in_child(out) -> None:
    out.put(lifecycle.by_process())


def test_a_forked_process_does_not_inherit_its_parents_phases():
    import multiprocessing as mp

    from rlbench.core.record.lifecycle import Phase

    lifecycle.record_phase(Phase.MODEL, 3.0)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=_phases_in_child, args=(out,))
    p.start()
    assert out.get(timeout=60) == {"driver": {}}
    p.join(30)
