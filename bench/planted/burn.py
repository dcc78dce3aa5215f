"""Planted slowdowns where they run: a stage named in RLBENCH_SLOW_STAGES (which
bench/planted/slowdown.py resolves for the cell and its worker processes inherit) busy-waits at its
end, inside it (a busy-wait, not a sleep: a real regression costs CPU too). The stage timer
(core/record/stages.py) and the sampler's decode step call `plant`; nothing here knows the stage
names, so the timer can import it and slowdown.py can import the timer's Stage enum.
"""
from __future__ import annotations

import os
import time

ACTIVE_ENV = "RLBENCH_SLOW_STAGES"


def _plan_from(text: str) -> dict[str, float]:
    return {s: float(f) for s, _, f in (p.partition("=") for p in text.split(",") if p)}


class _Cache:
    """The resolved plan of this process, re-read only when the variable changes (tests set it)."""

    def __init__(self):
        self.text, self.plan = None, {}

    def __call__(self) -> dict[str, float]:
        text = os.environ.get(ACTIVE_ENV, "")
        if text != self.text:
            self.text, self.plan = text, _plan_from(text)
        return self.plan

    def cache_clear(self) -> None:
        self.text = None


_plan = _Cache()


def forget() -> None:
    """Read RLBENCH_SLOW_STAGES afresh at the next stage (slowdown.activate has just set it)."""
    _plan.cache_clear()


def extra_seconds(stage: str, duration: float) -> float:
    """Seconds to add to a stage that took `duration` (0.0 unless a planted slowdown names it)."""
    return _plan().get(stage, 0.0) * max(duration, 0.0)


def burn(seconds: float, clock=time.perf_counter) -> None:
    """Busy-wait until `clock` (wall: perf_counter; CPU: thread_time) has advanced by `seconds`."""
    end = clock() + seconds
    while clock() < end:
        pass


def plant(stage: str, wall: float, cpu: float, idle: bool = False) -> None:
    """Called by the timer at the end of every stage (and by the sampler after every decode step):
    burn the planted extra, if any. idle: a stage that waits rather than works (queue_wait), slowed
    by wall time."""
    if idle:
        burn(extra_seconds(stage, wall))
    elif extra_seconds(stage, cpu):
        burn(extra_seconds(stage, cpu), time.thread_time)
