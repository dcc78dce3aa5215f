"""The hang watchdog: a worker that is asked to do something and shows no progress for too long ends
the run (WorkerError, exit 3) with a message naming the worker and the stage it was in.

A dead worker is noticed by its process ending (engines/hosts.py); a *hung* one (a stuck generation,
a deadlocked collective) stays alive, so liveness says nothing. Progress does: every worker process
counts stage starts and ends, finished groups, decode steps and micro-batches
(core/record/progress.py) and a heartbeat thread sends the count once per HEARTBEAT_S. A worker is
watched while a call to it is outstanding; it is hung when its count has not moved (or nothing at
all arrived from it) for the limit: engine.hang_timeout_s when set, else FACTOR x the longest stage
any worker measured so far, at least engine.hang_floor_s. A frozen process whose heartbeat thread
cannot run either (a C call holding the GIL) is caught the same way: nothing moves.

One Watchdog per engine (shared by its hosts, so a stage measured by the rollout workers also sizes
the trainer's limit); the hosts feed it and call `check()` while they wait.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rlbench.core.errors import WorkerError

FACTOR = 10.0  # the auto limit: this many times the longest stage measured so far
HEARTBEAT_S = 1.0  # how often a worker process reports its progress count


@dataclass
class Heartbeat:
    """A worker's progress report (core/record/progress.py Snapshot, with its name)."""

    worker: str
    beats: int
    stage: str | None
    iteration: int | None
    last_stage: str | None
    longest_s: float


class Watchdog:
    def __init__(self, limit_s: float | None = None, floor_s: float = 120.0,
                 factor: float = FACTOR):
        """limit_s: a fixed limit (engine.hang_timeout_s); None: factor x the longest stage, >=
        floor_s."""
        self.limit_s, self.floor_s, self.factor = limit_s, floor_s, factor
        self.longest_s = 0.0
        self._lock = threading.Lock()  # fed by a producer and a consumer thread at once
        self._outstanding: dict[str, int] = {}
        self._last: dict[str, float] = {}  # worker -> when it last showed progress (or got work)
        self._beats: dict[str, int] = {}
        self._seen: dict[str, Heartbeat] = {}
        # workers found hung: their hosts terminate them without waiting
        self.hung: set[str] = set()

    def limit(self) -> float:
        if self.limit_s is not None:
            return self.limit_s
        return max(self.floor_s, self.factor * self.longest_s)

    def submitted(self, worker: str) -> None:
        """A call went to `worker`: it is watched from now (an idle worker's quiet time does not
        count)."""
        with self._lock:
            n = self._outstanding.get(worker, 0)
            if n == 0:
                self._last[worker] = time.monotonic()
            self._outstanding[worker] = n + 1

    def answered(self, worker: str) -> None:
        with self._lock:
            self._outstanding[worker] = max(0, self._outstanding.get(worker, 0) - 1)
            self._last[worker] = time.monotonic()

    def heard(self, worker: str) -> None:
        """Something real arrived from `worker` (an emitted group)."""
        with self._lock:
            self._last[worker] = time.monotonic()

    def heartbeat(self, hb: Heartbeat) -> None:
        with self._lock:
            if self._beats.get(hb.worker) != hb.beats:
                self._last[hb.worker] = time.monotonic()
                self._beats[hb.worker] = hb.beats
            self._seen[hb.worker] = hb
            self.longest_s = max(self.longest_s, hb.longest_s)

    def check(self, doing: str, workers: list[str]) -> None:
        """WorkerError naming every watched worker of `workers` (the calling host's: only it reads
        their heartbeats, so only it knows how quiet they are) that has shown no progress for longer
        than the limit."""
        limit, t = self.limit(), time.monotonic()
        with self._lock:
            hung = sorted(w for w in workers if self._outstanding.get(w) and t
                          - self._last.get(w, t) > limit)
            if hung:
                lines = [self._describe(w, t - self._last[w]) for w in hung]
                self.hung.update(hung)
        if hung:
            raise WorkerError(f"hang watchdog: {'; '.join(lines)}; while {doing}. No progress for "
                              f"longer than {self._explain(limit)}")

    def _describe(self, worker: str, quiet: float) -> str:
        hb = self._seen.get(worker)
        if hb is None:
            where = "no heartbeat received"
        elif hb.stage is not None:
            where = f"in stage {hb.stage} of iteration {hb.iteration}"
        elif hb.last_stage is not None:
            where = f"between stages, after {hb.last_stage} of iteration {hb.iteration}"
        else:
            where = "before its first stage"
        return f"worker {worker} made no progress for {quiet:.1f}s ({where})"

    def _explain(self, limit: float) -> str:
        if self.limit_s is not None:
            return f"engine.hang_timeout_s={self.limit_s:g}s"
        return (f"{limit:.0f}s ({self.factor:g}x the longest stage so far, {self.longest_s:.2f}s, "
                f"at least engine.hang_floor_s={self.floor_s:g}s; set engine.hang_timeout_s to "
                f"change it)")
