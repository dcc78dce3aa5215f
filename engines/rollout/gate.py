"""The rollout gate: how a schedule whose rollout runs ahead of training (bounded staleness,
one-step-off, partial rollout) holds its rollout workers between two iterations.

Between iterations the driver evaluates, writes results and may wait for another interleaved cell's
turn; none of that is inside an iteration's TPSPD window (docs/metrics.md). A rollout worker that
kept generating meanwhile would hand the next iteration tokens made outside every window, so the
schedule closes the gate after each optimizer step and opens it when the next iteration starts. A
worker checks the gate at every step boundary of its backend (one shared integer read, no lock) and
before every request it serves; while the gate is closed it waits, ending its open stage event there
and starting a new one when it resumes (core/record/stages.py Recorder.suspend), so the paused time
is in no stage and no window.

Created before the worker processes start and handed to them as an argument (spawn pickles the
shared integer and the event only then). Local workers only: Ray actors share no memory with the
driver, so on Ray the gate is absent and the window keeps the gap (docs/metrics.md).
"""
from __future__ import annotations

import torch.multiprocessing as mp

# a held worker wakes this often to show the hang watchdog it is alive and waiting
WAIT_SLICE_S = 0.5


class RolloutGate:
    def __init__(self):
        ctx = mp.get_context("spawn")
        self._closed = ctx.RawValue("b", 0)  # read at every step boundary: a plain shared byte
        self._opened = ctx.Event()  # what a held worker sleeps on
        self._opened.set()

    @property
    def closed(self) -> bool:
        return bool(self._closed.value)

    def close(self) -> None:
        """Hold the workers at their next step boundary (the driver, after an optimizer step)."""
        self._opened.clear()
        self._closed.value = 1

    def open(self) -> None:
        """Let them go on (the driver, when the next iteration starts, and before shutting them
        down)."""
        self._closed.value = 0
        self._opened.set()

    def wait_open(self, alive=None) -> None:
        """Block while the gate is closed (a worker); alive() every WAIT_SLICE_S: the hang
        watchdog's sign that a held worker is waiting by design, not stuck."""
        while self.closed:
            self._opened.wait(WAIT_SLICE_S)
            if alive is not None:
                alive()
