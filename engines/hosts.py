"""Where a worker object lives: a local process pinned to its device, or a Ray actor
(engine.launcher=ray).

Both hosts (the Ray one in engines/ray_host.py) run the same worker classes (plain Python objects:
engines/trainer/ranks.py, engines/rollout/worker.py) and offer the same calls, so a schedule has one
code path whatever the launcher:

    call = host.submit(worker, "method", *args)      # returns at once
    values = host.wait([call, ...], doing="...")     # in order; emitted items go to on_emit
                                                     meanwhile

A worker may also `emit(item)` while a call runs (a rollout worker hands on each finished group this
way). A worker that dies or raises, does not start within timeout_s, or stops making progress (the
hang watchdog, engines/watchdog.py; every worker sends heartbeats for it) is a WorkerError that
names the worker and what it was doing. Messages between processes are the small dataclasses of
engines/host_messages.py.
"""
from __future__ import annotations

import os
import queue
import signal
import threading
import time
import traceback
from typing import Any, Callable

from rlbench.core import hooks
from rlbench.core.devices import device as dev
from rlbench.core.devices import procs, starting
from rlbench.core.errors import WorkerError
from rlbench.core.record import lifecycle
from rlbench.core.record.lifecycle import Phase
from rlbench.engines import launch
from rlbench.engines.host_messages import (POLL_S, Call, Emitted, Ready, Reply, Request, Started,
                                           start_heartbeats)
from rlbench.engines.ray_host import RayHost
from rlbench.engines.watchdog import Heartbeat, Watchdog

class ProcessHost(Started):
    """One process per slot (forked from the cell's fork server, or spawned:
    core/devices/starting.py), pinned to its device (core/devices/device.py `pin`), running
    cls(slot, *args)."""

    def __init__(self, slots, cls, args_of: Callable, timeout_s: float, watchdog: Watchdog):
        """timeout_s: the longest a worker may take to start; watchdog: bounds every call after
        that."""
        ctx = _context(all(slot.kind != "npu" for slot in slots))
        self.timeout_s, self.watchdog = timeout_s, watchdog
        self._deadline = time.monotonic() + timeout_s
        self.out = ctx.Queue()
        self.inbox: dict[str, Any] = {}
        self.procs: dict[str, Any] = {}
        super().__init__()
        self._replies: dict[int, Reply] = {}
        self._calls = 0
        # one reader of `out` at a time (a producer and a consumer thread)
        self._lock = threading.Lock()
        try:
            for slot in slots:
                self.inbox[slot.worker] = ctx.Queue()
                # Not daemonic: a worker may start processes of its own (vLLM's engine core).
                env = launch.start_env(slot)  # only its accelerator visible, from its start
                p = ctx.Process(target=_serve, name=f"rlbench-{slot.worker}",
                                args=(launch.child_slot(slot), cls, args_of(slot),
                                      self.inbox[slot.worker], self.out,
                                      env))
                with launch.environment(env):  # spawned: the environment it is created with
                    p.start()
                self.procs[slot.worker] = p
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> list[str]:
        return list(self.procs)

    def ready(self) -> None:
        """Wait until every worker has started (WorkerError naming one that failed or did not start
        within timeout_s of the host's creation). The constructor starts the processes without
        waiting, so the hosts of one engine start side by side; the first call, observation or pid
        waits."""
        if len(self._pids) == len(self.procs):
            return
        try:
            while len(self._pids) < len(self.procs):
                msg = self._next("starting")
                if isinstance(msg, Ready):
                    self._pids[msg.worker] = msg.pid
                    self._observed[msg.worker] = {**msg.observed, "pid": msg.pid}
                    self._phases[msg.worker] = msg.phases
                elif isinstance(msg, Reply) and not msg.ok:
                    raise WorkerError(f"{msg.worker} failed while starting:\n{msg.value}")
                elif msg is None and time.monotonic() > self._deadline:
                    missing = ", ".join(sorted(set(self.procs) - set(self._pids)))
                    raise WorkerError(f"worker {missing} did not start within "
                                      f"engine.queue_timeout_s={self.timeout_s:g}s")
        except BaseException:
            self.close()
            raise

    def submit(self, worker: str, method: str, *args) -> Call:
        self.ready()
        with self._lock:
            self._calls += 1
            n = self._calls
        self.watchdog.submitted(worker)
        self.inbox[worker].put(Request(n, method, args))
        return Call(worker, method, n)

    def wait(self, calls: list[Call], doing: str, on_emit: Callable | None = None) -> list:
        """The calls' return values in order; a failure in any of them raises at once, and so does a
        worker that stops making progress (engines/watchdog.py)."""
        self.ready()
        out: dict[int, Any] = {}
        while len(out) < len(calls):
            with self._lock:
                for c in calls:
                    if c.ref not in out and c.ref in self._replies:
                        out[c.ref] = self._value(self._replies.pop(c.ref), doing)
                if len(out) == len(calls):
                    break
                msg = self._next(doing)
                if isinstance(msg, Reply):
                    self.watchdog.answered(msg.worker)
                    self._replies[msg.call] = msg
                elif isinstance(msg, Emitted):
                    self.watchdog.heard(msg.worker)
                    if on_emit is None:
                        raise WorkerError(f"{msg.worker} emitted an item nobody waits for while "
                                          f"{doing}")
                    on_emit(msg.item)
            self.watchdog.check(doing, self.workers)
        return [out[c.ref] for c in calls]

    def _value(self, reply: Reply, doing: str):
        if not reply.ok:
            raise WorkerError(f"{reply.worker} failed while {doing}:\n{reply.value}")
        return reply.value

    def _next(self, doing: str):
        """The next message (heartbeats go to the watchdog), or None after POLL_S; a dead worker is
        a WorkerError."""
        try:
            msg = self.out.get(timeout=POLL_S)
        except queue.Empty:
            msg = None
        if isinstance(msg, Heartbeat):
            self.watchdog.heartbeat(msg)
            return None
        if msg is None:
            dead = {n: p.exitcode for n, p in self.procs.items() if not p.is_alive()}
            if dead:
                names = ", ".join(dead)
                raise WorkerError(f"worker {names} died while {doing} (exit codes {dead})")
        return msg

    def close(self, timeout_s: float = 5.0) -> None:
        """Ask every worker to stop (its close() runs), then terminate what is left after timeout_s
        (a worker stuck in a collective whose peer died never answers); a worker the watchdog found
        hung is terminated at once."""
        for q in self.inbox.values():
            try:
                q.put(None)
            except (ValueError, OSError):
                pass
        deadline = time.monotonic() + timeout_s
        for name, p in self.procs.items():
            if name not in self.watchdog.hung:
                p.join(max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)


def _context(forkable: bool):
    """The multiprocessing context of worker processes (core/devices/starting.py): forked from the
    cell's fork server, a worker lays the environment it is handed (its one visible accelerator)
    over its own before it touches the device; spawned where one holds an NPU or
    RLBENCH_START=spawn."""
    return starting.context(forkable, tensors=True)


def _serve(slot, cls, args: tuple, inbox, out, env: dict[str, str]) -> None:
    """A worker process: pin to the slot's device, build the object, answer requests until told to
    stop. `slot` is the worker's view (engines/launch.py child_slot: its one visible accelerator is
    index 0); env: the variables it starts with (launch.start_env), which a process forked from the
    cell's fork server has from the server instead. It dies with its parent (a cell that dies hard
    leaves no worker behind) and reports its progress for the hang watchdog from a thread."""
    # before anything here touches CUDA, which reads CUDA_VISIBLE_DEVICES once
    os.environ.update(env)
    # spawned: the interpreter's start too
    lifecycle.record_phase(Phase.IMPORTS, lifecycle.process_age_s() or 0.0)
    starting.detach()  # forked by the cell's fork server: it must end with the cell
    procs.die_with_parent(signal.SIGKILL)
    procs.interruptible()  # a Ctrl-C passed on to the cell's group reaches the worker too
    obj = None
    try:
        with lifecycle.phase(Phase.DEVICE):
            dev.pin(slot.kind, slot.index, slot.threads)
            dev.initialise(slot.kind, slot.index)

        hooks.call("started", slot.worker)  # a planted fault: a worker given other than its plan
        obj = cls(slot, *args, emit=lambda item: out.put(Emitted(slot.worker, item)))
        out.put(Ready(slot.worker, os.getpid(), dev.observe(slot.kind), lifecycle.phases()))
    except BaseException:  # noqa: BLE001 - reported, then this process ends
        out.put(Reply(-1, slot.worker, False, traceback.format_exc()))
        return
    stop = start_heartbeats(slot.worker, out.put)
    parent = os.getppid()
    while True:
        try:
            req = inbox.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:  # the driver is gone: do not linger
                break
            continue
        if req is None:
            break
        try:
            out.put(Reply(req.call, slot.worker, True, getattr(obj, req.method)(*req.args)))
        except BaseException:  # noqa: BLE001 - the driver raises it as a WorkerError
            out.put(Reply(req.call, slot.worker, False, traceback.format_exc()))
    stop.set()
    close = getattr(obj, "close", None)
    if close is not None:
        close()


def make_host(launcher: str, slots, cls, args_of: Callable, timeout_s: float, watchdog: Watchdog,
              owns_ray: bool = False, placement: dict | None = None):
    """The host engine.launcher names: local processes or Ray actors (placement:
    engine.placement)."""
    if launcher == "ray":
        return RayHost(slots, cls, args_of, timeout_s, watchdog, owns_ray, placement)
    return ProcessHost(slots, cls, args_of, timeout_s, watchdog)
