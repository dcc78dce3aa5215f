"""The cell's end of VERL's turns (probe.py asks inside VERL): two FIFOs in the cell's folder,
answered as TRL's rank 0 is answered (engines/external/trl/gate.py GateServer: ready, before K,
after K, leave).

While VERL waits for its turn, every process of it is stopped (SIGSTOP) and continued (SIGCONT) when
the turn comes: VERL's asynchronous recipes keep rolling out in the background, and the other cells'
turns are theirs alone. So a VERL cell, like rlbench's own schedules whose rollout runs ahead, gets
no work done during another cell's turn.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

from rlbench.engines.external.trl.gate import GateServer


class FifoGate(GateServer):
    """GateServer over two FIFOs (VERL's logging process is a Ray actor: no inherited pipe reaches
    it)."""

    def __init__(self, pacer, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in ("request", "reply"):
            path = self.folder / name
            path.unlink(missing_ok=True)
            os.mkfifo(path)
        super().__init__(pacer)
        for fd in (self._req_r, self.child_request, self.child_reply, self._rep_w):
            os.close(fd)  # the base's pipes: the FIFOs replace them
        # read-write opens never block on Linux, and keep a FIFO open while VERL's side comes and
        # goes
        self._req_r = os.open(self.folder / "request", os.O_RDWR)
        self._rep_w = os.open(self.folder / "reply", os.O_RDWR)

    def child_started(self) -> None:
        """Nothing inherited to close."""


class Frozen:
    """A pacer that stops the VERL run's processes while it waits for a turn, and continues them
    after."""

    def __init__(self, pacer, pids_of):
        self.pacer, self.pids_of = pacer, pids_of

    def __getattr__(self, name):
        return getattr(self.pacer, name)

    def before(self, k: int) -> None:
        self._stopped(self.pacer.before, k)

    def leave(self, wait_for_others: bool = False) -> None:
        """Its last turn done: stopped while the other cells finish theirs (a recipe may still be
        rolling out)."""
        self._stopped(self.pacer.leave, wait_for_others)

    def _stopped(self, wait, *args) -> None:
        pids = self.pids_of()
        _signal(pids, signal.SIGSTOP)
        try:
            wait(*args)
        finally:
            _signal(pids, signal.SIGCONT)


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


