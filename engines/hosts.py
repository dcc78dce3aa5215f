"""Where a worker object lives: a local process pinned to its device, or a Ray actor (engine.backend=ray).

Both hosts run the same worker classes (plain Python objects: engines/trainer/ranks.py,
engines/rollout/worker.py) and offer the same calls, so a schedule has one code path whatever the
backend:

    call = host.submit(worker, "method", *args)      # returns at once
    values = host.wait([call, ...], doing="...")     # in order; emitted items go to on_emit meanwhile

A worker may also `emit(item)` while a call runs (a rollout worker hands on each finished group this
way). A worker that dies or raises, does not start within timeout_s, or stops making progress (the hang
watchdog, engines/watchdog.py; every worker sends heartbeats for it) is a WorkerError that names the
worker and what it was doing. Messages between processes are the small dataclasses below.
"""
from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from rlbench.engines.watchdog import HEARTBEAT_S, Heartbeat, Watchdog
from rlbench.errors import WorkerError

POLL_S = 0.05  # how often a waiting driver checks that its workers are alive


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
    observed: dict  # what the process was given: affinity, threads, visible devices (bench/device.py observe)


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


class ProcessHost:
    """One spawned process per slot, pinned to its device (bench/device.py `pin`), running cls(slot, *args)."""

    def __init__(self, slots, cls, args_of: Callable, timeout_s: float, watchdog: Watchdog):
        """timeout_s: the longest a worker may take to start; watchdog: bounds every call after that."""
        from rlbench.engines import launch

        ctx = _context()
        self.timeout_s, self.watchdog = timeout_s, watchdog
        self.out = ctx.Queue()
        self.inbox: dict[str, Any] = {}
        self.procs: dict[str, Any] = {}
        self.pids: dict[str, int] = {}
        self.observed: dict[str, dict] = {}  # worker -> what it observed once started
        self._replies: dict[int, Reply] = {}
        self._calls = 0
        self._lock = threading.Lock()  # one reader of `out` at a time (a producer and a consumer thread)
        try:
            for slot in slots:
                self.inbox[slot.worker] = ctx.Queue()
                # Not daemonic: a worker may start processes of its own (vLLM's engine core).
                p = ctx.Process(target=_serve, name=f"rlbench-{slot.worker}",
                                args=(launch.child_slot(slot), cls, args_of(slot), self.inbox[slot.worker], self.out))
                with launch.environment(launch.start_env(slot)):  # only its accelerator visible, from its start
                    p.start()
                self.procs[slot.worker] = p
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> list[str]:
        return list(self.procs)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while len(self.pids) < len(self.procs):
            msg = self._next("starting")
            if isinstance(msg, Ready):
                self.pids[msg.worker] = msg.pid
                self.observed[msg.worker] = {**msg.observed, "pid": msg.pid}  # pid: bench/hostcpu.py reads it
            elif isinstance(msg, Reply) and not msg.ok:
                raise WorkerError(f"{msg.worker} failed while starting:\n{msg.value}")
            elif msg is None and time.monotonic() > deadline:
                missing = ", ".join(sorted(set(self.procs) - set(self.pids)))
                raise WorkerError(f"worker {missing} did not start within engine.queue_timeout_s="
                                  f"{self.timeout_s:g}s")

    def submit(self, worker: str, method: str, *args) -> Call:
        with self._lock:
            self._calls += 1
            n = self._calls
        self.watchdog.submitted(worker)
        self.inbox[worker].put(Request(n, method, args))
        return Call(worker, method, n)

    def wait(self, calls: list[Call], doing: str, on_emit: Callable | None = None) -> list:
        """The calls' return values in order; a failure in any of them raises at once, and so does a
        worker that stops making progress (engines/watchdog.py)."""
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
                        raise WorkerError(f"{msg.worker} emitted an item nobody waits for while {doing}")
                    on_emit(msg.item)
            self.watchdog.check(doing, self.workers)
        return [out[c.ref] for c in calls]

    def _value(self, reply: Reply, doing: str):
        if not reply.ok:
            raise WorkerError(f"{reply.worker} failed while {doing}:\n{reply.value}")
        return reply.value

    def _next(self, doing: str):
        """The next message (heartbeats go to the watchdog), or None after POLL_S; a dead worker is a
        WorkerError."""
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
        """Ask every worker to stop (its close() runs), then terminate what is left after timeout_s (a
        worker stuck in a collective whose peer died never answers); a worker the watchdog found hung is
        terminated at once."""
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


def _context():
    """The multiprocessing context of worker processes (torch's: tensors passed to a worker are shared,
    not copied); spawn, so a worker starts from a fresh interpreter with the environment it was given."""
    import torch.multiprocessing as mp

    return mp.get_context("spawn")


def _serve(slot, cls, args: tuple, inbox, out) -> None:
    """A worker process: pin to the slot's device, build the object, answer requests until told to stop.
    `slot` is the worker's view (engines/launch.py child_slot: its one visible accelerator is index 0).
    It dies with its parent (a cell that dies hard leaves no worker behind) and reports its progress
    for the hang watchdog from a thread."""
    import signal

    from rlbench import procs

    procs.die_with_parent(signal.SIGKILL)
    procs.interruptible()  # a Ctrl-C passed on to the cell's group reaches the worker too
    obj = None
    try:
        from rlbench import device as dev

        dev.pin(slot.kind, slot.index, slot.threads)
        from rlbench import faults

        faults.misplace(slot.worker)  # test hook: a worker given other than its plan
        obj = cls(slot, *args, emit=lambda item: out.put(Emitted(slot.worker, item)))
        out.put(Ready(slot.worker, os.getpid(), dev.observe(slot.kind)))
    except BaseException:  # noqa: BLE001 - reported, then this process ends
        out.put(Reply(-1, slot.worker, False, traceback.format_exc()))
        return
    stop = _start_heartbeats(slot.worker, out.put)
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


def _start_heartbeats(worker: str, put: Callable) -> threading.Event:
    """A daemon thread sending this process's progress count every HEARTBEAT_S; -> its stop event."""
    from dataclasses import asdict

    from rlbench import progress

    stop = threading.Event()

    def run() -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                put(Heartbeat(worker, **asdict(progress.snapshot())))
            except Exception:  # noqa: BLE001 - the queue is closed: the process is ending
                return

    threading.Thread(target=run, name="heartbeat", daemon=True).start()
    return stop


class RayHost:
    """The same workers as Ray actors: one per slot, holding its device as a Ray resource."""

    def __init__(self, slots, cls, args_of: Callable, timeout_s: float, watchdog: Watchdog, owns_ray: bool = False):
        """The Ray session must be running (engines/ray_util.py `ensure_ray`); owns_ray: shut it down in
        close(). timeout_s: the longest an actor may take to start; watchdog: bounds every call after that."""
        import ray
        from ray.util.queue import Queue

        from rlbench.engines import launch
        from rlbench.engines.ray_util import forwarded_env

        self._ray, self.timeout_s, self.watchdog, self._owns_ray = ray, timeout_s, watchdog, owns_ray
        self.actors: dict[str, Any] = {}
        self.pids: dict[str, int] = {}
        self.observed: dict[str, dict] = {}
        self.emitted = None
        try:
            self.emitted = Queue(actor_options={"num_cpus": 0})
            remote = ray.remote(max_restarts=0, max_task_retries=0)(_RayWorker)
            sharing = launch.sharing(slots)
            for slot in slots:
                self.actors[slot.worker] = remote.options(
                    **launch.ray_options(slot, sharing[slot.worker]), runtime_env=forwarded_env()).remote(
                    slot, cls, args_of(slot), self.emitted)
            self.pids = self._started()
            self.observed = dict(zip(self.actors, ray.get([a.observe.remote() for a in self.actors.values()])))
        except BaseException:
            self.close()
            raise

    def _started(self) -> dict[str, int]:
        """Every actor's pid once it is built; WorkerError naming the ones not started within timeout_s."""
        from rlbench.engines.ray_util import actor_error

        refs = {self.actors[n].pid.remote(): n for n in self.actors}
        ready, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=self.timeout_s)
        if len(ready) < len(refs):
            missing = ", ".join(sorted(refs[r] for r in refs if r not in ready))
            raise WorkerError(f"worker {missing} did not start within engine.queue_timeout_s={self.timeout_s:g}s")
        pids = {}
        for ref, name in refs.items():
            try:
                pids[name] = self._ray.get(ref)
            except Exception as e:  # noqa: BLE001 - the actor failed while starting
                raise actor_error(self._ray, e, name, "starting") from None
        return pids

    @property
    def workers(self) -> list[str]:
        return list(self.actors)

    def submit(self, worker: str, method: str, *args) -> Call:
        self.watchdog.submitted(worker)
        return Call(worker, method, self.actors[worker].call.remote(method, *args))

    def wait(self, calls: list[Call], doing: str, on_emit: Callable | None = None) -> list:
        from rlbench.engines.ray_util import actor_error

        pending = {c.ref: c for c in calls}
        while pending:
            self._forward(on_emit, POLL_S if on_emit else 0, doing)
            ready, _ = self._ray.wait(list(pending), num_returns=len(pending), timeout=0 if on_emit else POLL_S)
            for ref in ready:
                c = pending.pop(ref)
                self.watchdog.answered(c.worker)
                try:
                    self._ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a dead actor or an exception in it
                    raise actor_error(self._ray, e, c.worker, doing) from None
            self.watchdog.check(doing, self.workers)
        while self._forward(on_emit, 0, doing):  # an actor emits before its call returns: the rest is queued
            pass
        return [self._ray.get(c.ref) for c in calls]

    def _forward(self, on_emit, wait_s: float, doing: str) -> int:
        """Hand emitted items to on_emit and heartbeats to the watchdog; -> how many were taken."""
        from ray.util.queue import Empty

        if self.emitted is None:
            return 0
        try:
            first = self.emitted.get(timeout=wait_s) if wait_s > 0 else self.emitted.get_nowait()
        except Empty:
            return 0
        items = [first] + self.emitted.get_nowait_batch(self.emitted.qsize())
        for item in items:
            if isinstance(item, Heartbeat):
                self.watchdog.heartbeat(item)
            elif on_emit is None:
                raise WorkerError(f"a worker emitted an item nobody waits for while {doing}")
            else:
                on_emit(item)
        return len(items)

    def close(self, timeout_s: float = 10.0) -> None:
        ray = self._ray
        if not ray.is_initialized():
            return
        stops = [a.stop.remote() for a in self.actors.values()]
        if stops:
            ray.wait(stops, num_returns=len(stops), timeout=timeout_s)
        for a in self.actors.values():
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.actors = {}
        if self.emitted is not None:
            try:
                self.emitted.shutdown(force=True)
            except Exception:  # noqa: BLE001
                pass
        if self._owns_ray:
            ray.shutdown()


class _RayWorker:
    """Inside a Ray actor: pin, build the worker object, run its methods (same object as in a process)."""

    def __init__(self, slot, cls, args: tuple, emitted):
        from rlbench import device as dev
        from rlbench.engines import launch

        slot = launch.child_slot(slot)  # Ray makes the actor's accelerator the only visible one: index 0
        self.kind = slot.kind
        dev.pin(slot.kind, slot.index, slot.threads)
        self.obj = cls(slot, *args, emit=emitted.put)
        self._heartbeats = _start_heartbeats(slot.worker, emitted.put)  # Ray calls run in one thread

    def pid(self) -> int:
        return os.getpid()

    def observe(self) -> dict:
        """What this actor was given (bench/device.py observe) and its Ray node (devices are per node)."""
        import ray

        from rlbench import device as dev

        return {**dev.observe(self.kind), "node": ray.get_runtime_context().get_node_id()}

    def call(self, method: str, *args):
        return getattr(self.obj, method)(*args)

    def stop(self) -> None:
        self._heartbeats.set()
        close = getattr(self.obj, "close", None)
        if close is not None:
            close()


def make_host(backend: str, slots, cls, args_of: Callable, timeout_s: float, watchdog: Watchdog,
              owns_ray: bool = False):
    """The host engine.backend names: local processes or Ray actors."""
    if backend == "ray":
        return RayHost(slots, cls, args_of, timeout_s, watchdog, owns_ray)
    return ProcessHost(slots, cls, args_of, timeout_s, watchdog)
