"""A worker process's sign of progress, read by its heartbeat thread (engines/hosts.py) for the hang
watchdog (engines/watchdog.py).

`beats` counts progress: a stage starting or ending (the one Recorder calls `enter` / `leave`), a
finished group, a decode step of a rollout backend (`beat`). A heartbeat thread alive in a stuck
process keeps sending the same count, so the driver tells "alive but stuck" from "working" by the
count, not by the heartbeat arriving. Also kept: the stage the process is in (for the error message)
and the longest stage it has measured (the watchdog's yardstick). Plain integers and a float under
the GIL: a beat costs nanoseconds, so a decode loop can call it every step.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Snapshot:
    beats: int
    stage: str | None  # the stage being run, None between stages
    iteration: int | None
    last_stage: str | None  # the last stage that ended (where a hang between stages happened)
    longest_s: float  # the longest stage measured in this process so far


class _State:
    def __init__(self):
        self.beats, self.stage, self.iteration, self.last_stage, self.longest_s = (0, None, None,
                                                                                   None, 0.0)


_STATE = _State()


def beat() -> None:
    """One unit of progress (a decode step, a finished group)."""
    _STATE.beats += 1


def enter(stage: str, iteration: int) -> None:
    s = _STATE
    s.beats += 1
    s.stage, s.iteration = stage, iteration


def leave(stage: str, seconds: float) -> None:
    """The stage ended after `seconds`, as the Recorder measured it (the one timer,
    core/record/stages.py)."""
    s = _STATE
    s.beats += 1
    s.longest_s = max(s.longest_s, seconds)
    if s.stage == stage:
        s.stage, s.last_stage = None, stage


def snapshot() -> Snapshot:
    s = _STATE
    return Snapshot(s.beats, s.stage, s.iteration, s.last_stage, s.longest_s)
