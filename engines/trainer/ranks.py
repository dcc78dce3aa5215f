"""Data-parallel trainer ranks, one per training device, in pinned processes or Ray actors.

Every rank holds a full replica: policy, reference model and AdamW state (VERL's FSDP would shard
them; rlbench's models fit one device). Each rank accumulates the gradient of the token *sum* over
its share of the iteration's groups (engines/schedules/periodic_async/README.md) with the one
trainer entry, `Trainer.train`; `step` is `Trainer.finish`, which all-reduces (SUM,
torch.distributed: gloo on CPU, nccl on CUDA, hccl on NPU) the token count, the loss sums and every
gradient, then every rank takes the same step on the same numbers, so the replicas stay identical
without a broadcast. With one rank nothing is reduced and the update is bitwise the single
trainer's.

- Async schedules (`TrainerRank`, role trainer): the driver deals the groups as they arrive (the
  j-th group trained goes to rank j mod ranks) and returns at once, so ranks compute while it
  receives.
- sync (`spec` given, role colocated, VERL's hybrid engine): each rank also owns a rollout backend
  and runs its whole shard of the iteration (colocated.py: local weight sync, rollout,
  `Trainer.train`, the same all-reduced step).
"""
from __future__ import annotations

import contextlib
import datetime
import socket

import torch
import torch.distributed as dist

from rlbench.core import hooks
from rlbench.core.devices import device as dev
from rlbench.core.devices import peak
from rlbench.core.record import lifecycle
from rlbench.core.record.lifecycle import Phase
from rlbench.core.record.profiling import from_env
from rlbench.core.record.stages import Recorder, Stage
from rlbench.engines.model.weights import build_model, initial_state
from rlbench.engines.ray_nodes import gloo_interface
from rlbench.engines.ray_util import to_numpy
from rlbench.engines.rollout import EVALUATION, build_backend
from rlbench.engines.trainer.colocated import colocated_iteration
from rlbench.engines.trainer.trainer import Trainer

# torch.distributed's, per device kind
_DIST_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


class TrainerRank:
    """One rank (inside a process or a Ray actor; engines/hosts.py builds it with its Slot)."""

    def __init__(self, slot, rank: int, world: int, model_config, weights, cfg, tok, t0: float,
                 spec: dict | None, shared: dict | None, emit=None):
        self.device = dev.resolve(slot.kind, slot.index)
        self.rank, self.world, self.dist_backend = rank, world, _DIST_BACKENDS[slot.kind]
        # every model copy starts from the initial weights: the run's file mapped once per copy (its
        # own pages)
        self._new_model = lambda: build_model(model_config, self.device, initial_state(weights))
        with lifecycle.phase(Phase.WEIGHTS):
            policy = self._new_model().train()
        with lifecycle.phase(Phase.OPTIMIZER):
            self.trainer = Trainer(policy, cfg, tok, world, ref=self._new_model())
        self.rec = Recorder(slot.worker, t0, device=self.device, devices=1)
        # where rank 0 publishes weights (local processes)
        self.shared = shared if rank == 0 else None
        self.sampler = None
        self._eval_sampler = None  # built on the first evaluation (engines/evaluation.py)
        self._model_config, self._eos, self._max_num_seqs = (model_config, tok.eos_token_id,
                                                             cfg.rollout.max_num_seqs)
        self._spec = spec
        if spec is not None:  # colocated: this rank generates its own shard too
            with lifecycle.phase(Phase.WEIGHTS):
                self.sampler = build_backend(spec, model_config, tok.eos_token_id,
                                             cfg.rollout.max_num_seqs,
                                             self.device, self._new_model,
                                             dict(policy.named_parameters()),
                                             own_process_group=True)
        self.prof = from_env(slot.worker, self.device.type)
        # RLBENCH_PROFILE_WINDOW=train: the training stages open and close it
        self.prof.attach(self.rec)

    # ---------------------------------------------------------------- process group

    def rendezvous_address(self, local: bool) -> str:
        """Rank 0's host:port for the process group (a free port; loopback for local processes)."""
        host = "127.0.0.1"
        if not local:
            import ray  # inside: optional dependency (ray)

            host = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        return f"{host}:{port}"

    def join(self, address: str, timeout_s: float, local: bool = True) -> None:
        """Join the group whose rank 0 listens at `address`. On Ray, gloo binds to the interface of
        this rank's node address (where the host name resolves may be no address the other nodes
        reach)."""
        if not local and self.dist_backend == "gloo":
            import ray  # inside: optional dependency (ray)

            gloo_interface(ray.util.get_node_ip_address())
        dist.init_process_group(self.dist_backend, init_method=f"tcp://{address}", rank=self.rank,
                                world_size=self.world,
                                timeout=datetime.timedelta(seconds=timeout_s))

    # ---------------------------------------------------------------- the trainer interface

    def begin(self) -> None:
        self.trainer.begin()

    def train(self, k: int, groups: list, answers: dict) -> dict:
        """Trainer.train on this rank's groups (callable several times per iteration); -> their
        rewards."""
        hooks.call("iteration", k, "trainer")
        return self.trainer.train(self.rec, k, groups, answers)

    def step(self, k: int) -> tuple[dict, list]:
        """The trainer's finish (all-reduce, then the same step on every rank); -> (stats, stage
        events)."""
        stats, _ = self.trainer.finish(self.rec, k)
        self.prof.step()
        return stats, self.rec.drain()

    def iteration(self, k: int, requests: list, sampling, answers: dict):
        """sync: this rank's shard of iteration k, start to step (colocated.py, VERL's hybrid
        engine); -> (ColocatedResult, stage events)."""
        result = colocated_iteration(self.trainer, self.sampler, self.rec, k, requests, sampling,
                                     answers)
        self.prof.step()
        return result, self.rec.drain()

    def publish(self, iteration: int | None) -> None:
        """Rank 0: copy the weights into the shared-memory tensors; timed as weight_sync of
        `iteration` (None: for an evaluation between iterations, not part of any iteration)."""
        ctx = self.rec.stage(Stage.WEIGHT_SYNC,
                             iteration) if iteration is not None else contextlib.nullcontext()
        with ctx, torch.no_grad():
            for n, p in self.trainer.policy.named_parameters():
                self.shared[n].copy_(p)

    def publish_ref(self, iteration: int | None) -> list:
        """Rank 0 on Ray: put the weights into this node's object store, timed as weight_sync of
        `iteration` (None: outside any iteration); -> [their reference], which rollout workers fetch
        from this node directly (one crossing of the link, not two through the driver)."""
        import ray  # inside: optional dependency (ray)

        ctx = self.rec.stage(Stage.WEIGHT_SYNC,
                             iteration) if iteration is not None else contextlib.nullcontext()
        with ctx, torch.no_grad():
            return [ray.put(to_numpy(self.trainer.weights()))]

    def evaluate(self, requests: list, sampling) -> list:
        """Greedy evaluation answers of the current weights, generated on this rank's device with
        the built-in sampler (a colocated rank's own when it has one) -> groups (token ids)."""
        if self._eval_sampler is None:
            if self._spec is not None and self._spec.get("backend") == EVALUATION["backend"]:
                # it loads the trainer's weights before every rollout
                self._eval_sampler = self.sampler
            else:
                self._eval_sampler = build_backend(EVALUATION, self._model_config, self._eos,
                                                   self._max_num_seqs,
                                                   self.device, self._new_model)
        self._eval_sampler.load_weights(self.trainer.weights(), self.trainer.version)
        return self._eval_sampler.generate(requests, sampling)

    def device_facts(self, dtype) -> tuple[dict, dict]:
        """This rank's device as results.json's provenance describes it, and its measured peak
        (core/devices/peak.py)."""
        return dev.describe(self.device), peak.peak(self.device, dtype)

    def weights(self) -> dict:
        return to_numpy(self.trainer.weights())

    def version(self) -> int:
        return self.trainer.version

    def close(self) -> None:
        self.prof.close()
        if dist.is_initialized():
            dist.destroy_process_group()
