"""The Ray host (engine.launcher=ray): the same workers as engines/hosts.py's local processes, as
Ray actors holding their devices as Ray resources; the same submit / wait calls and WorkerErrors."""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from rlbench.core import hooks
from rlbench.core.devices import device as dev
from rlbench.core.errors import WorkerError
from rlbench.core.record import lifecycle
from rlbench.core.record.lifecycle import Phase
from rlbench.core.record.stages import NODE_CLOCK, node_now
from rlbench.engines import launch
from rlbench.engines.host_messages import POLL_S, Call, Started, start_heartbeats
from rlbench.engines.ray_clock import CLOCK_GROUP
from rlbench.engines.ray_nodes import own_node
from rlbench.engines.ray_util import actor_error, forwarded_env, wait_exited
from rlbench.engines.watchdog import Heartbeat, Watchdog


class RayHost(Started):
    """The same workers as Ray actors: one per slot, holding its device as a Ray resource."""

    def __init__(self, slots, cls, args_of: Callable, timeout_s: float, watchdog: Watchdog,
                 owns_ray: bool = False,
                 placement: dict | None = None):
        """The Ray session must be running (engines/ray_util.py `ensure_ray`); owns_ray: shut it
        down in close(). timeout_s: the longest an actor may take to start; watchdog: bounds every
        call after that; placement: engine.placement (the nodes each role's actors go to)."""
        # inside: optional dependency (ray)
        import ray
        from ray.util.queue import Queue
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._ray, self.timeout_s, self.watchdog, self._owns_ray = (ray, timeout_s, watchdog,
                                                                    owns_ray)
        self.actors: dict[str, Any] = {}
        self._deadline = time.monotonic() + timeout_s
        super().__init__()
        self.emitted = None
        try:
            # the queue on the driver's node: a finished group crosses the link once, to the driver,
            # and the loss of a worker node is the loss of its workers, never of the queue (soft
            # affinity put it on a worker node of a three-node cluster)
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                  soft=False)
            self.emitted = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
            # the clock group's thread answers clock probes while the actor computes
            # (engines/ray_clock.py)
            remote = ray.remote(max_restarts=0, max_task_retries=0,
                                concurrency_groups={CLOCK_GROUP: 1})(_RayWorker)
            sharing = launch.sharing(slots)
            for slot in slots:
                self.actors[slot.worker] = remote.options(
                    **launch.ray_options(slot, sharing[slot.worker], placement),
                    runtime_env=forwarded_env()).remote(
                    slot, cls, args_of(slot), self.emitted)
        except BaseException:
            self.close()
            raise

    def ready(self) -> None:
        """Wait until every actor is built (as engines/hosts.py ProcessHost.ready: the constructor
        does not wait, so the hosts of one engine start side by side)."""
        if self._pids or not self.actors:
            return
        ray = self._ray
        try:
            pids = self._started()
            self._observed = dict(zip(self.actors,
                                      ray.get([a.observe.remote() for a in self.actors.values()])))
            self._phases = dict(zip(self.actors,
                                    ray.get([a.phases.remote() for a in self.actors.values()])))
            self._pids = pids
        except BaseException:
            self.close()
            raise

    def _started(self) -> dict[str, int]:
        """Every actor's pid once it is built; WorkerError naming the ones not started within
        timeout_s of the host's creation."""
        refs = {self.actors[n].pid.remote(): n for n in self.actors}
        left = max(0.0, self._deadline - time.monotonic())
        ready, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=left)
        if len(ready) < len(refs):
            missing = ", ".join(sorted(refs[r] for r in refs if r not in ready))
            raise WorkerError(f"worker {missing} did not start within "
                              f"engine.queue_timeout_s={self.timeout_s:g}s")
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
        self.ready()
        self.watchdog.submitted(worker)
        return Call(worker, method, self.actors[worker].call.remote(method, *args))

    def wait(self, calls: list[Call], doing: str, on_emit: Callable | None = None) -> list:
        pending = {c.ref: c for c in calls}
        while pending:
            self._forward(on_emit, POLL_S if on_emit else 0, doing)
            ready, _ = self._ray.wait(list(pending), num_returns=len(pending),
                                      timeout=0 if on_emit else POLL_S)
            for ref in ready:
                c = pending.pop(ref)
                self.watchdog.answered(c.worker)
                try:
                    self._ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a dead actor or an exception in it
                    raise actor_error(self._ray, e, c.worker, doing) from None
            self.watchdog.check(doing, self.workers)
        # an actor emits before its call returns: the rest is queued
        while self._forward(on_emit, 0, doing):
            pass
        return [self._ray.get(c.ref) for c in calls]

    def _forward(self, on_emit, wait_s: float, doing: str) -> int:
        """Hand emitted items to on_emit and heartbeats to the watchdog; -> how many were taken."""
        from ray.util.queue import Empty  # inside: optional dependency (ray)

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
        # a worker the watchdog found hung is killed without waiting (as engines/hosts.py's
        # processes)
        stops = [a.stop.remote() for n, a in self.actors.items() if n not in self.watchdog.hung]
        if stops:
            ray.wait(stops, num_returns=len(stops), timeout=timeout_s)
        for a in self.actors.values():
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.actors = {}
        # ray.kill returns before the process ends: the run must not exit with its workers on this
        # node still alive (a pid of another node is not one of this machine's processes)
        here = ray.get_runtime_context().get_node_id()
        wait_exited([pid for name, pid in self._pids.items()
                     if self._observed.get(name, {}).get("node") == here], timeout_s)
        if self.emitted is not None:
            try:
                self.emitted.shutdown(force=True)
            except Exception:  # noqa: BLE001
                pass
        if self._owns_ray:
            ray.shutdown()


class _RayWorker:
    """Inside a Ray actor: pin, build the worker object, run its methods (same object as in a
    process)."""

    def __init__(self, slot, cls, args: tuple, emitted):
        import ray  # inside: optional dependency (ray)

        # Ray makes the actor's accelerator the only visible one: index 0
        slot = launch.child_slot(slot)
        self.kind = slot.kind
        self.node = own_node(ray)
        # a planted error of this node's clock
        hooks.call("node", self.node["node_resources"], NODE_CLOCK)
        with lifecycle.phase(Phase.DEVICE):
            dev.pin(slot.kind, slot.index, slot.threads)
            dev.initialise(slot.kind, slot.index)
        self.obj = cls(slot, *args, emit=emitted.put)
        self._heartbeats = start_heartbeats(slot.worker, emitted.put)  # Ray calls run in one thread

    def pid(self) -> int:
        return os.getpid()

    def observe(self) -> dict:
        """What this actor was given (core/devices/device.py observe) and its Ray node (devices are
        per node): id, address, custom resources."""
        return {**dev.observe(self.kind), **self.node}

    def clock(self) -> float:
        """This node's own clock (called in the clock group: answered while the actor computes)."""
        return node_now()

    def set_clock(self, offset_s: float, elsewhere: bool) -> None:
        """This node's clock is offset_s ahead of the driver's: stage events are mapped to the
        driver's from now on (core/record/stages.py); elsewhere: this node is not the driver's."""
        NODE_CLOCK.offset, NODE_CLOCK.elsewhere = offset_s, elsewhere

    def phases(self) -> dict:
        """This actor's start-up phases (core/record/lifecycle.py)."""
        return lifecycle.phases()

    def call(self, method: str, *args):
        return getattr(self.obj, method)(*args)

    def stop(self) -> None:
        self._heartbeats.set()
        close = getattr(self.obj, "close", None)
        if close is not None:
            close()
