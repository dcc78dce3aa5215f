"""A VERL cell's turns (run.interleave): VERL's logging process asks through two FIFOs (probe.py), the cell answers
(turns.py), and VERL's processes are stopped while another cell has the turn. No VERL needed: the probe's Turns is
driven as VERL's Tracking.log drives it."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from rlbench.engines.external.verl.probe import Turns
from rlbench.engines.external.verl.turns import FifoGate, Frozen


class Recorder:
    """A pacer that records its calls."""

    def __init__(self):
        self.calls: list[str] = []

    def setup(self):
        self.calls.append("setup")

    def ready(self):
        self.calls.append("ready")

    def before(self, k):
        self.calls.append(f"before {k}")

    def after(self, k):
        self.calls.append(f"after {k}")

    def leave(self, wait_for_others=False):
        self.calls.append(f"leave {wait_for_others}")


def serve_until(gate, done: threading.Event) -> None:
    while not done.is_set():
        gate.serve(0.05)


def test_verls_logging_drives_the_cells_turns(tmp_path):
    pacer = Recorder()
    gate = FifoGate(pacer, tmp_path / "turns")
    done = threading.Event()
    server = threading.Thread(target=serve_until, args=(gate, done))
    server.start()
    turns = Turns(str(tmp_path / "turns"), steps=2)
    step = {"perf/total_num_tokens": 100, "timing_s/step": 1.0}
    rollouter = {"fully_async/rollouter/active_time": 1.0}  # the fully-async recipe's other lines
    # VERL's sync trainer logs steps 1, 2; the fully-async recipe numbers them by weight version (here 4, 4)
    for k, data in [(0, {"val-core/x/acc/mean@1": 0.1}), (0, rollouter), (4, step), (4, rollouter), (4, step)]:
        turns.logged(k, data)
    done.set()
    server.join()
    gate.close()
    assert pacer.calls == ["ready", "before 0", "after 0", "before 1", "after 1", "leave True"]


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_verls_processes_are_stopped_while_another_cell_has_the_turn():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seen = []

    class Waiting(Recorder):
        def before(self, k):
            time.sleep(0.2)  # the other cells' turns
            seen.append(state(child.pid))

    try:
        Frozen(Waiting(), lambda: [child.pid]).before(3)
        time.sleep(0.1)
        assert seen == ["T"] and state(child.pid) in ("S", "R")  # stopped while waiting, running after
    finally:
        child.kill()
        child.wait()
