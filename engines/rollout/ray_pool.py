"""A pool of rollout workers as Ray actors (`engine.backend=ray`): same interface as ProcessRolloutPool.

- Placement: each actor holds its devices as Ray resources: on CPU one actor with
  `num_cpus=rollout_devices` (as many intra-op threads), on CUDA one actor per GPU (`num_gpus=1`),
  on NPU one per NPU (`resources={"NPU": 1}`).
- Weights: `publish` converts the state dict to numpy once per version and `ray.put`s it; every
  actor `ray.get`s that one object (zero-copy from the node's shared-memory object store: read-only
  arrays that are copied straight into the model), timed on the actor as its `weight_sync` stage.
- Groups: an actor pushes each finished group into a `ray.util.queue.Queue` the moment its G samples
  are done; the producer thread forwards them to the schedule's local queue. An actor's stage events
  and sampler stats come back as the return value of its `generate` task, like the process pool's
  "done" message.
- Failures: a dead actor (RayActorError) or an exception in one (RayTaskError) becomes a WorkerError
  within the poll interval; no answer for `timeout_s` does too.
"""
from __future__ import annotations

import logging
import os
import re
import time

from rlbench.errors import UserError, WorkerError

POLL_S = 0.2  # how long the producer waits on the group queue before checking the actors' tasks


class RayRolloutPool:
    def __init__(self, model, eos_token_id: int, max_num_seqs: int, devices: int, device_kind: str,
                 t0: float, start_timeout_s: float = 300.0, ray_address: str | None = None,
                 actors: int | None = None, num_cpus: int | None = None):
        """`devices`: the rollout pool's devices (CPU: cores). `actors`: rollout actors (default: one on
        CPU, one per device on an accelerator). `num_cpus`: CPUs of a locally started cluster (default:
        this machine's cores). `ray_address`: attach to that cluster instead of starting one."""
        try:
            import ray
            from ray.util.queue import Queue
        except ImportError:
            raise UserError("engine.backend=ray needs Ray: pip install 'rlbench[ray]'") from None

        self._ray = ray
        self.actors_n = actors or (1 if device_kind == "cpu" else devices)
        if device_kind == "cpu" and devices % self.actors_n:
            raise UserError(f"engine.rollout_devices={devices} must be a multiple of the {self.actors_n} "
                            "Ray rollout actors (each actor gets an equal share of the cores)")
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            init_ray(ray, ray_address, num_cpus, devices, device_kind)
        self.names = [f"rollout{i}" for i in range(self.actors_n)]
        self.actors: dict = {}
        self.queue = None
        self._syncing: dict = {}  # ObjectRef of a pending weight load -> (actor name, what it is doing)
        self._round = 0  # numbers each produce() call; groups of an abandoned call are dropped, not trained
        self.pids: dict = {}  # actor name -> process id (tests check that close() leaves none behind)
        try:
            self.queue = Queue(actor_options={"num_cpus": 0})
            self._weights = ray.put(to_numpy(dict(model.named_parameters())))
            share = devices // self.actors_n if device_kind == "cpu" else 1
            remote = ray.remote(max_restarts=0, max_task_retries=0)(RolloutActor)
            for n in self.names:
                self.actors[n] = remote.options(**actor_resources(device_kind, share),
                                                runtime_env=forwarded_env()).remote(
                    n, model.config, [self._weights], eos_token_id, max_num_seqs, share, device_kind, t0)
            self._wait_ready(start_timeout_s)
            self._align_clocks(t0)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- setup

    def _wait_ready(self, timeout_s: float) -> None:
        """Block until every actor has built its model; a crash or no placement in time is a WorkerError."""
        refs = {self.actors[n].ready.remote(): n for n in self.names}
        ready, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        self.pids = {refs[ref]: self._result(ref, refs[ref], "starting") for ref in ready}
        if len(ready) < len(refs):
            late = sorted(refs[r] for r in refs if r not in ready)
            raise WorkerError(f"rollout actor(s) {', '.join(late)} not started within {timeout_s:.0f}s: the Ray "
                              f"cluster may lack the resources they ask for (it has {self._ray.cluster_resources()})")

    def _align_clocks(self, t0: float) -> None:
        """Stage times are relative to the driver's t0 on CLOCK_MONOTONIC, which only one machine shares.

        An actor on another node gets t0 shifted by its clock offset, estimated from the fastest of a
        few round trips (error: half that round trip)."""
        here = self._ray.get_runtime_context().get_node_id()
        for n, actor in self.actors.items():
            best = None
            for _ in range(5):
                sent = time.monotonic()
                node, theirs = self._ray.get(actor.clock.remote())
                back = time.monotonic()
                if node == here:
                    break
                if best is None or back - sent < best[0]:
                    best = (back - sent, theirs - (sent + back) / 2)
            if best is not None:
                actor.set_t0.remote(t0 + best[1])

    # ---------------------------------------------------------------- the pool interface

    def publish(self, weights: dict, version: int, iteration: int) -> None:
        """Put the trainer's weights into the object store once; every actor loads them (asynchronously)."""
        self._weights = self._ray.put(to_numpy(weights))
        for n, actor in self.actors.items():
            # Wrapped in a list so the actor fetches the object inside its timed weight_sync stage.
            ref = actor.sync.remote([self._weights], version, iteration)
            self._syncing[ref] = (n, f"loading weights version {version}")

    def produce(self, iteration: int, requests, sampling, groups, timeout_s: float) -> None:
        """Producer thread body: dispatch the iteration's prompts, forward each finished group.

        Ends with ("end", events, stats) on `groups`; an error goes on `groups` for the consumer to raise.
        """
        try:
            pending, self._syncing = self._syncing, {}
            self._round += 1
            doing = f"generating iteration {iteration}"
            for i, n in enumerate(self.names):
                shard = requests[i::len(self.names)]
                ref = self.actors[n].generate.remote(iteration, shard, sampling, self.queue, self._round)
                pending[ref] = (n, doing)
            events, stats = [], []
            deadline = time.monotonic() + timeout_s
            while pending:
                moved = self._forward(groups, POLL_S)
                ready, _ = self._ray.wait(list(pending), num_returns=len(pending), timeout=0)
                for ref in ready:
                    name, what = pending.pop(ref)
                    # A crash fails every task queued on that actor, whichever is reported first.
                    out = self._result(ref, name, what, died_while=doing)
                    if out is not None:  # a generate task: (events, stats); a weight load returns None
                        events += out[0]
                        stats.append(out[1])
                if moved or ready:
                    deadline = time.monotonic() + timeout_s
                elif time.monotonic() > deadline:
                    raise WorkerError(f"no answer from the rollout actors for {timeout_s:.0f}s while {doing}")
            # An actor puts each group before its generate task returns, so the rest is already queued.
            while self._forward(groups, 0):
                pass
            groups.put(("end", events, stats))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer thread
            groups.put(e)

    def _forward(self, groups, wait_s: float) -> int:
        """Move this round's queued groups from the Ray queue to the schedule's queue; -> items taken."""
        from ray.util.queue import Empty

        try:
            first = self.queue.get(timeout=wait_s) if wait_s > 0 else self.queue.get_nowait()
        except Empty:
            return 0
        except self._ray.exceptions.RayError as e:
            raise WorkerError(f"the Ray group queue failed: {first_line(e)}") from None
        items = [first] + self.queue.get_nowait_batch(self.queue.qsize())  # only we consume: qsize is a floor
        for round_, g in items:
            if round_ == self._round:
                groups.put(g)
        return len(items)

    def _result(self, ref, name: str, doing: str, died_while: str | None = None):
        """ray.get of one finished task; Ray's failures become WorkerErrors that name the actor and what it
        was doing (`died_while`, if given, for a dead actor)."""
        exc = self._ray.exceptions
        try:
            return self._ray.get(ref)
        except exc.RayActorError as e:
            if "creation task" in str(e):  # its constructor raised: show the traceback, like the process pool
                raise WorkerError(f"rollout worker {name} failed while {doing}:\n{plain(e)}") from None
            raise WorkerError(f"rollout worker {name} died while {died_while or doing} "
                              f"(Ray actor died: {first_line(e)})") from None
        except exc.RayTaskError as e:
            raise WorkerError(f"rollout worker {name} failed while {doing}:\n{plain(e)}") from None

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the actors (up to timeout_s for their profilers to flush), kill them and the queue; shut
        Ray down (or disconnect) if this pool initialised it."""
        ray = self._ray
        if not ray.is_initialized():
            return
        stops = [a.stop.remote() for a in self.actors.values()]
        if stops:
            ray.wait(stops, num_returns=len(stops), timeout=timeout_s)  # a dead actor's fails at once
        for actor in list(self.actors.values()):
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.actors = {}
        if self.queue is not None:
            try:
                self.queue.shutdown(force=True)
            except Exception:  # noqa: BLE001
                pass
            self.queue = None
        if self._owns_ray:
            ray.shutdown()


class RolloutActor:
    """One rollout worker inside a Ray actor: a model copy and a BuiltinSampler, like worker.py's process."""

    def __init__(self, name: str, model_config, weights: list, eos_token_id: int, max_num_seqs: int,
                 threads: int, device_kind: str, t0: float):
        import json

        from rlbench import device as dev
        from rlbench.engines.rollout.worker import BACKEND_ENV, BUILTIN, _build_model, build_backend
        from rlbench.profiling import from_env
        from rlbench.stages import Recorder

        dev.set_threads(threads)
        device = dev.resolve(device_kind)
        self.name = name
        # The backend spec and profiling settings arrive as RLBENCH_* variables (forwarded_env), as in worker.py.
        spec = json.loads(os.environ.get(BACKEND_ENV) or json.dumps(BUILTIN))
        self.sampler = build_backend(spec, model_config, eos_token_id, max_num_seqs, device,
                                     lambda: _build_model(model_config, device))
        self._load(weights, 0)
        self.rec = Recorder(name, t0, device=device, devices=threads)
        self.prof = from_env(name, device.type)  # a no-op unless the run asked for --profile

    def ready(self) -> int:
        return os.getpid()

    def clock(self):
        import ray

        return ray.get_runtime_context().get_node_id(), time.monotonic()

    def set_t0(self, t0: float) -> None:
        self.rec.t0 = t0

    def _load(self, weights: list, version: int) -> None:
        import ray

        self.sampler.load_weights(from_numpy(ray.get(weights[0])), version)

    def sync(self, weights: list, version: int, iteration: int) -> None:
        from rlbench.stages import Stage

        with self.rec.stage(Stage.WEIGHT_SYNC, iteration):
            self._load(weights, version)

    def generate(self, iteration: int, requests, sampling, queue, round_: int):
        """-> (stage events since the last call, sampler stats); each group goes to `queue` when done,
        tagged with the pool's round so that groups of an abandoned iteration are recognised."""
        from rlbench.engines.rollout.worker import fault_hook
        from rlbench.stages import Stage

        fault_hook(iteration)
        with self.rec.stage(Stage.ROLLOUT, iteration):
            self.sampler.generate(requests, sampling, on_group=lambda g: queue.put((round_, g)))
        self.prof.step()
        return self.rec.drain(), dict(self.sampler.last_stats)

    def stop(self) -> None:
        self.prof.close()
