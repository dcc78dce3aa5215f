"""What a cell records outside its measured iterations (bench/core/record/lifecycle.py): the age of a process, the
peak memory of a process and its children, and the seconds a cell waited in the turn ring (which start-up
leaves out)."""
import subprocess
import sys
import threading
import time

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
        while time.monotonic() < deadline and (lifecycle.peaks({"rollout0": parent.pid}).get("rollout0") or 0) < 200:
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
