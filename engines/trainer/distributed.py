"""Data-parallel training over Ray actors with torch.distributed (gloo on CPU, nccl on CUDA, hccl on NPU).

Every rank is a Ray actor holding a full replica: policy, reference model and AdamW state. The
iteration's groups are dealt to the ranks round-robin as they come (the j-th group trained goes to
rank j mod ranks); each rank runs the same `train_phases` on its share, accumulating the gradient of
the token *sum* (DESIGN.md §1). `finish` all-reduces (SUM) the token count, the loss/KL sums and every
gradient, then each rank takes the same `Trainer.step` on the same numbers, so the replicas stay
identical without a broadcast. The update equals one trainer's up to the summation order of the
gradient (close, not bitwise; with one rank, bitwise).

`DataParallelTrainer` is the schedules' trainer when engine.backend=ray: it has the local Trainer's
begin / train / finish / weights / version, so sync, periodic-async and bounded-async drive it unchanged.
"""
from __future__ import annotations

import socket

from rlbench.errors import WorkerError

_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


class TrainerRank:
    """One data-parallel rank inside a Ray actor: a Trainer on its own device and its own Recorder."""

    def __init__(self, rank: int, world: int, model_config, weights: list, cfg, tok, device_kind: str,
                 threads: int, t0: float):
        import ray

        from rlbench import device as dev
        from rlbench.engines.rollout.ray_pool import from_numpy
        from rlbench.engines.rollout.worker import _build_model
        from rlbench.engines.trainer.trainer import Trainer
        from rlbench.stages import Recorder

        dev.set_threads(threads)
        self.device = dev.resolve(device_kind)
        self.rank, self.world, self.backend = rank, world, _BACKENDS[device_kind]
        policy = _build_model(model_config, self.device).train()
        policy.load_state_dict(from_numpy(ray.get(weights[0])), strict=False)
        self.trainer = Trainer(policy, cfg, tok)  # its reference model is a copy of these initial weights
        self.rec = Recorder(f"trainer{rank}", t0, device=self.device, devices=threads)

    def rendezvous_address(self) -> str:
        """Rank 0's host:port for the process group (a free port on its node)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"{ray.util.get_node_ip_address()}:{port}"

    def join(self, address: str, timeout_s: float) -> None:
        import datetime

        import torch.distributed as dist

        dist.init_process_group(self.backend, init_method=f"tcp://{address}", rank=self.rank,
                                world_size=self.world, timeout=datetime.timedelta(seconds=timeout_s))

    def begin(self) -> None:
        self.trainer.begin()

    def train(self, k: int, groups: list, answers: dict) -> dict:
        """train_phases on this rank's groups (callable several times per iteration); -> rewards."""
        from rlbench.engines.rollout.worker import fault_hook
        from rlbench.engines.trainer.phases import train_phases

        fault_hook(k, "trainer")
        return train_phases(self.trainer, self.rec, k, groups, answers)

    def step(self, k: int):
        """All-reduce gradients and counts, then the ordinary Trainer.step; -> (stats, stage events)."""
        from rlbench.stages import Stage

        with self.rec.stage(Stage.OPTIMIZER_STEP, k):
            self._all_reduce()
            stats = self.trainer.step()
        return stats, self.rec.drain()

    def _all_reduce(self) -> None:
        """Sum token counts, loss/KL sums and gradients over ranks (one flat buffer for the gradients)."""
        import torch
        import torch.distributed as dist

        tr = self.trainer
        params = list(tr.policy.parameters())
        # [3 + n_params]: tokens, loss sum, kl sum, then 1 per parameter that has a gradient on this rank
        counts = torch.tensor([tr.tokens, tr.loss_sum, tr.kl_sum] + [p.grad is not None for p in params],
                              dtype=torch.float64)
        dist.all_reduce(counts)
        tr.tokens, tr.loss_sum, tr.kl_sum = int(counts[0]), float(counts[1]), float(counts[2])
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])  # [sum of numel]
        dist.all_reduce(flat)
        offset = 0
        for p, has in zip(params, counts[3:].tolist()):
            n = p.numel()
            # A parameter no rank touched keeps grad None, as in one trainer (AdamW then skips it).
            p.grad = flat[offset:offset + n].view_as(p).clone() if has else None
            offset += n

    def weights(self) -> dict:
        from rlbench.engines.rollout.ray_pool import to_numpy

        return to_numpy(self.trainer.weights())

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class DataParallelTrainer:
    """Driver side: `ranks` TrainerRank actors and one process group, shaped like the local Trainer.

    devices: the devices the ranks share (CPU: cores, split evenly); default engine.train_devices.
    """

    def __init__(self, policy, cfg, tok, ranks: int, device_kind: str, t0: float, devices: int | None = None,
                 ray_address: str | None = None, num_cpus: int | None = None, start_timeout_s: float = 300.0):
        import ray

        from rlbench.engines.rollout.ray_pool import actor_resources, forwarded_env, init_ray, to_numpy

        self._ray, self.timeout_s = ray, start_timeout_s
        self._owns_ray = not ray.is_initialized()
        threads = (devices or cfg.engine.train_devices) // ranks if device_kind == "cpu" else 1
        if self._owns_ray:
            init_ray(ray, ray_address, num_cpus, threads * ranks, device_kind)
        self.names = [f"trainer{r}" for r in range(ranks)]
        self.ranks: list = []
        self.version = 0
        self._policy = policy  # the driver's copy; `policy` loads the trained weights into it
        self._pending: list = []  # this iteration's train calls, in order
        self._dealt = 0  # groups dealt to the ranks this iteration
        try:
            weights = ray.put(to_numpy(dict(policy.named_parameters())))
            remote = ray.remote(max_restarts=0, max_task_retries=0)(TrainerRank)
            self.ranks = [remote.options(**actor_resources(device_kind, threads), runtime_env=forwarded_env())
                          .remote(r, ranks, policy.config, [weights], cfg, tok, device_kind, threads, t0)
                          for r in range(ranks)]
            address = self._get(self.ranks[0].rendezvous_address.remote(), "starting")
            self._all(lambda a: a.join.remote(address, start_timeout_s), "joining the process group")
        except BaseException:
            self.close()
            raise

    def begin(self) -> None:
        self._all(lambda a: a.begin.remote(), "starting an iteration")
        self._pending, self._dealt = [], 0

    def train(self, rec, k: int, groups: list, answers: dict) -> None:
        """Deal the groups to the ranks and return at once: the ranks train while the schedule goes on.

        Their stage events come back at `finish` and are added to rec then."""
        n = len(self.ranks)
        shares: dict[int, list] = {}
        for g in groups:
            shares.setdefault(self._dealt % n, []).append(g)
            self._dealt += 1
        for r, share in shares.items():
            mine = {g.prompt_index: answers[g.prompt_index] for g in share}
            self._pending.append(self.ranks[r].train.remote(k, share, mine))

    def finish(self, rec, k: int) -> tuple[dict, dict]:
        """Wait for the ranks' shares, all-reduce and step; -> (rank 0's step stats, rewards of every group)."""
        shares = self._get_all(self._pending, f"training iteration {k}")
        steps = self._all(lambda a: a.step.remote(k), f"stepping iteration {k}")
        self._pending = []
        self.version += 1
        rec.extend([ev for _, events in steps for ev in events])
        return steps[0][0], {i: r for share in shares for i, r in share.items()}

    def weights(self) -> dict:
        from rlbench.engines.rollout.ray_pool import from_numpy

        return from_numpy(self._get(self.ranks[0].weights.remote(), "sending weights"))

    @property
    def policy(self):
        """The driver's copy of the model holding rank 0's current weights."""
        import torch

        trained = self.weights()
        with torch.no_grad():
            for name, p in self._policy.named_parameters():
                p.copy_(trained[name])
        return self._policy

    def replica_weights(self) -> list[dict]:
        """Every rank's weights (tests: the replicas must stay identical)."""
        from rlbench.engines.rollout.ray_pool import from_numpy

        return [from_numpy(w) for w in self._all(lambda a: a.weights.remote(), "sending weights")]

    # ---------------------------------------------------------------- Ray plumbing

    def _all(self, call, doing: str) -> list:
        return self._get_all([call(a) for a in self.ranks], doing)

    def _all_args(self, calls, doing: str) -> list:
        return self._get_all([m.remote(*args) for m, args in calls], doing)

    def _get_all(self, refs: list, doing: str) -> list:
        """Results in rank order; the first failure (a dead rank, an exception) is a WorkerError."""
        pending = list(refs)
        while pending:
            ready, pending = self._ray.wait(pending, num_returns=1, timeout=self.timeout_s)
            if not ready:
                raise WorkerError(f"no answer from the trainer ranks for {self.timeout_s:.0f}s while {doing}")
            self._get(ready[0], doing)  # raises early, before a surviving rank waits on a collective forever
        return [self._ray.get(r) for r in refs]

    def _get(self, ref, doing: str):
        from rlbench.engines.rollout.ray_pool import first_line, plain

        exc = self._ray.exceptions
        try:
            return self._ray.get(ref, timeout=self.timeout_s)
        except exc.GetTimeoutError:
            raise WorkerError(f"no answer from a trainer rank for {self.timeout_s:.0f}s while {doing}") from None
        except exc.RayActorError as e:
            if "creation task" in str(e):
                raise WorkerError(f"a trainer rank failed while {doing}:\n{plain(e)}") from None
            raise WorkerError(f"a trainer rank died while {doing} (Ray actor died: {first_line(e)})") from None
        except exc.RayTaskError as e:
            raise WorkerError(f"a trainer rank failed while {doing}:\n{plain(e)}") from None

    def close(self) -> None:
        ray = self._ray
        if not ray.is_initialized():
            return
        for a in self.ranks:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.ranks = []
        if self._owns_ray:
            ray.shutdown()
