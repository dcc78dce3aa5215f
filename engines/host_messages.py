"""The small messages between the driver and its worker processes or actors (engines/hosts.py,
engines/ray_host.py), the heartbeat thread every worker runs for the hang watchdog, and what both
hosts tell of their started workers (`Started`)."""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from rlbench.core.record import progress
from rlbench.engines.watchdog import HEARTBEAT_S, Heartbeat

POLL_S = 0.05  # how often a waiting driver checks that its workers are alive


class Started:
    """What a host tells of its workers once they have started: their pids, what each observed (its
    device, cores, threads; core/devices/device.py observe) and its start-up phases
    (core/record/lifecycle.py). A host starts its workers without waiting for them, so the hosts of
    one engine start side by side; reading any of these waits (the host's `ready()`)."""

    def __init__(self) -> None:
        self._pids: dict[str, int] = {}
        self._observed: dict[str, dict] = {}
        self._phases: dict[str, dict] = {}

    def ready(self) -> None:
        raise NotImplementedError

    @property
    def pids(self) -> dict[str, int]:
        self.ready()
        return self._pids

    @property
    def observed(self) -> dict[str, dict]:
        self.ready()
        return self._observed

    @property
    def phases(self) -> dict[str, dict]:
        self.ready()
        return self._phases


@dataclass
class Request:
    call: int
    method: str
    args: tuple


@dataclass
class Reply:
    call: int
    worker: str
    ok: bool
    value: Any  # the method's return value, or the worker's traceback text


@dataclass
class Ready:
    worker: str
    pid: int
    # what the process was given: affinity, threads, visible devices (core/devices/device.py
    # observe)
    observed: dict
    # its start-up phases (core/record/lifecycle.py Phase)
    phases: dict = field(default_factory=dict)


@dataclass
class Emitted:
    worker: str
    item: Any


@dataclass
class Call:
    """A submitted method call; `ref` is the host's handle (a call number, or a Ray ObjectRef)."""

    worker: str
    method: str
    ref: Any


def start_heartbeats(worker: str, put: Callable) -> threading.Event:
    """A daemon thread sending this process's progress count every HEARTBEAT_S; -> its stop
    event."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                put(Heartbeat(worker, **asdict(progress.snapshot())))
            except Exception:  # noqa: BLE001 - the queue is closed: the process is ending
                return

    threading.Thread(target=run, name="heartbeat", daemon=True).start()
    return stop
