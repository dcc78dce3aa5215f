"""Compose an engine from the config: the schedule picks the composition, not `if`s in the parts."""
from __future__ import annotations

import atexit
import copy
import random
import shutil
import tempfile
from pathlib import Path

import torch

from rlbench.core import schedules
from rlbench.core.components import BACKENDS
from rlbench.core.devices import device as dev
from rlbench.core.devices.placement import plan
from rlbench.core.errors import UserError
from rlbench.core.record import lifecycle
from rlbench.core.record.lifecycle import Phase
from rlbench.core.record.stages import Recorder, Role
from rlbench.engines import hosts, launch
from rlbench.engines.data.source import load_dataset
from rlbench.engines.evaluation import InProcessEval, WorkerEval, eval_inputs, score
from rlbench.engines.model.weight_file import write_weights
from rlbench.engines.model.weights import SharedState
from rlbench.engines.ray_clock import start_clock_sync
from rlbench.engines.ray_util import ensure_ray, to_numpy
from rlbench.engines.rollout.base import PromptRequest
from rlbench.engines.rollout.pool import RolloutPool
from rlbench.engines.rollout.sampling import LengthSampling
from rlbench.engines.rollout.worker import EVALUATION, RolloutWorker, backend_spec, build_backend
from rlbench.engines.schedules import engine_of
from rlbench.engines.schedules.common import IterationInput
from rlbench.engines.trainer.distributed import DataParallelTrainer
from rlbench.engines.trainer.ranks import TrainerRank
from rlbench.engines.trainer.trainer import Trainer
from rlbench.engines.watchdog import Watchdog


def check_supported(cfg) -> None:
    """Config keys the built-in engines do not implement are refused, never ignored (exit 2)."""
    missing = BACKENDS[cfg.rollout.backend].missing()
    if missing:
        raise UserError(missing)
    if getattr(cfg.rollout, "cuda_graphs", None) and cfg.engine.device == "auto":
        # UserError where auto finds no CUDA
        dev.use_graphs(True, torch.device(dev.resolve_kind("auto")))
    problem = dev.compile_problem(cfg.engine.compile, dev.resolve_kind(cfg.engine.device))
    if problem:  # inductor cannot build its kernels here
        raise UserError(problem)
    if cfg.train.ppo_mini_batches != 1:
        raise UserError(
            f"train.ppo_mini_batches={cfg.train.ppo_mini_batches}: rlbench's built-in engines take "
            "one optimizer step per iteration on the whole batch (the paper's periodic asynchrony "
            "needs it, and sync is compared on the same update); allowed: 1. --engine verl and "
            "--engine mindspeed-rl honour it.")


def build_schedule(cfg, policy, tok, t0: float, sink, device, dataset=None, placement=None,
                   weights=None):
    """-> (schedule, evaluator). The schedule's trainer owns the training weights; evaluator(cfg,
    dataset, tok) -> the evaluation's accuracies (engines/evaluation.py). weights: the run's weight
    file holding `policy`'s parameters (engines/model/weight_file.py), which local workers map;
    None: written to a temporary file when a local worker needs it (the tests' engines).

    placement (core/devices/placement.py): where every worker runs; each holds its own copy of
    `policy`, and this process (the driver) holds no accelerator: `policy` stays on the CPU,
    evaluation runs on the trainer's rank 0, and what every worker observed is checked against the
    plan (engines/launch.py). None: the trainer (and a colocated schedule's rollout) run in this
    process: the tests' in-process reference, and a config whose schedule record says it runs in
    process (`in_process`). `dataset`: a schedule that runs ahead reads iterations ahead of the
    runner; without it, it is loaded again from the config (the same seeded split)."""
    check_supported(cfg)
    spec = schedules.of(cfg)  # the schedule's record (core/schedules/)
    if placement is None or spec.in_process(cfg):
        return _in_process_engine(cfg, policy, tok, t0, sink, device, dataset, placement, weights)
    dev.set_threads(1)  # the driver dispatches and scores; the workers compute
    with lifecycle.phase(Phase.WORKERS):
        session = _Session(cfg, policy, tok, t0, placement,
                           Recorder(Role.DRIVER.value, t0, sink=sink), dataset,
                           weights=weights)
    try:
        build = engine_of(spec).build  # the schedule's build(options, session) (engines/schedules/)
        with lifecycle.phase(Phase.WORKERS):
            schedule = build(spec.read(cfg), session)
            session.check_observed()  # waits for every host's workers (they start side by side)
        return schedule, WorkerEval(schedule.trainer)
    except BaseException:
        session.close()
        raise


def _in_process_engine(cfg, policy, tok, t0: float, sink, device, dataset, placement, weights):
    """The trainer in this process (on `device`), evaluation here too; a schedule whose record has
    an in-process builder runs whole here, the others' rollout workers as planned."""
    e = cfg.engine
    spec = schedules.of(cfg)
    policy = policy.to(device)
    make_model = (lambda: copy.deepcopy(policy).eval())
    eval_sampler = build_backend(EVALUATION, policy.config, tok.eos_token_id,
                                 cfg.rollout.max_num_seqs, device,
                                 make_model)
    dev.set_threads(e.num_devices if device.type == "cpu" else 1)
    whole = engine_of(spec).build_in_process
    if whole:  # the whole schedule in this process
        schedule = whole(cfg, policy, tok, t0, sink, device, placement, make_model)
        return schedule, InProcessEval(eval_sampler, schedule.trainer, device)

    placement = plan(e, device.type, available=e.num_devices)  # rollout workers as planned
    session = _Session(cfg, policy, tok, t0, placement, Recorder(Role.DRIVER.value, t0, sink=sink),
                       dataset,
                       trainer_in_process=True, weights=weights)
    try:
        build = engine_of(spec).build
        with lifecycle.phase(Phase.WORKERS):
            schedule = build(spec.read(cfg), session)
            session.report_phases()  # waits for every host's workers (they start side by side)
        return schedule, InProcessEval(eval_sampler, schedule.trainer, device)
    except BaseException:
        session.close()
        raise


class _Session:
    """What a schedule's build(options, session) gets besides its options: the config, the driver's
    recorder (`recorder`: the events route), the weights every worker starts from, how workers are
    hosted (`trainer(role)`, `rollout_pool(...)`) and the iteration inputs (`future_inputs`)."""

    def __init__(self, cfg, policy, tok, t0: float, placement, recorder, dataset=None,
                 trainer_in_process: bool = False, weights=None):
        e = cfg.engine
        self.cfg, self.policy, self.tok, self.t0, self.placement = cfg, policy, tok, t0, placement
        self.recorder, self.dataset = recorder, dataset
        self.trainer_in_process = trainer_in_process
        self.ray = e.launcher == "ray"
        self.owns_ray = False
        self.hosts: list = []
        self.clock = None  # Ray: every node's clock mapped to this process's (engines/ray_clock.py)

        # one for every host of the engine
        self.watchdog = Watchdog(e.hang_timeout_s, e.hang_floor_s)
        if self.ray:
            self.owns_ray = ensure_ray(e.ray_address, placement.devices, placement.kind)
        # Local workers map the initial weights from the run's file and read the published ones from
        # one block of shared memory (engines/model/weights.py); Ray ones get both from the object
        # store.
        self.shared = None if self.ray else SharedState.like(dict(policy.named_parameters()))
        self._file = weights
        self._ref = None

    def weights(self):
        """How a worker gets the initial weights: the run's weight file (written to a temporary one
        where the caller gave none), or a Ray object reference in a list."""
        if not self.ray:
            if self._file is None:
                folder = Path(tempfile.mkdtemp(prefix="rlbench-weights-"))
                # read by the workers as long as they live
                atexit.register(shutil.rmtree, folder, True)
                self._file = write_weights(self.policy, folder / "model.safetensors")
            return self._file
        if self._ref is None:
            import ray  # inside: optional dependency (ray)

            self._ref = [ray.put(to_numpy(dict(self.policy.named_parameters())))]
        return self._ref

    def host(self, role, cls, args_of, owns_ray: bool = False):
        slots = self.placement.of(role)
        host = hosts.make_host(self.cfg.engine.launcher, slots, cls,
                               lambda s: args_of(slots.index(s), len(slots)),
                               self.cfg.engine.queue_timeout_s, self.watchdog,
                               owns_ray and self.owns_ray,
                               placement=self.cfg.engine.placement)
        self.hosts.append(host)
        return host

    def trainer(self, role):
        """Data-parallel ranks on the role's slots (colocated ranks also get the rollout
        backend)."""
        cfg, tok = self.cfg, self.tok
        if self.trainer_in_process:
            return Trainer(self.policy, cfg, tok)
        spec = backend_spec(cfg) if role == Role.COLOCATED else None
        host = self.host(role, TrainerRank, lambda r,
                         n: (r, n, self.policy.config, self.weights(), cfg, tok,
                                                          self.t0, spec,
                             self.shared if r == 0 else None),
                         owns_ray=True)  # rank 0 publishes
        return DataParallelTrainer(host, self.policy, self.shared)

    def rollout_pool(self, mailbox=None, gate=None):
        """The rollout workers on the rollout slots. mailbox (engines/rollout/mailbox.py), gate
        (engines/rollout/gate.py): made by a schedule that needs them, handed to every worker."""
        cfg = self.cfg
        host = self.host(Role.ROLLOUT, RolloutWorker, lambda r, n: (
            self.policy.config, self.weights(), self.shared, self.tok.eos_token_id,
            cfg.rollout.max_num_seqs,
            backend_spec(cfg), self.t0, mailbox, gate),
            owns_ray=self.trainer_in_process)  # else the trainer's host owns Ray
        return RolloutPool(host, self.shared, mailbox, gate)

    def future_inputs(self):
        """m -> IterationInput of iteration m, for a schedule that dispatches ahead of the
        runner."""
        dataset = self.dataset
        if dataset is None:
            dataset = load_dataset(self.cfg.data, self.cfg.run.seed)
        return lambda m: iteration_input(self.cfg, dataset, self.tok, m)

    def check_observed(self) -> None:
        """Record what every worker observed next to the plan (results.json `placement`); a worker
        given other than the plan (core, threads, visible device) ends the run (WorkerError, exit
        3)."""
        observed = {w: o for host in self.hosts for w, o in host.observed.items()}
        self.placement.observed.update(observed)
        self.report_phases()
        launch.check(self.placement, observed, exact_device=not self.ray)
        if self.ray:
            self.clock = start_clock_sync({w: a for host in self.hosts
                                           for w, a in host.actors.items()}, observed,
                                          self.t0, self.placement.clocks)

    def report_phases(self) -> None:
        """The workers' start-up phases, for this process's lifecycle record
        (core/record/lifecycle.py)."""
        lifecycle.add_workers({w: p for host in self.hosts for w, p in host.phases.items()})

    def close(self) -> None:
        if self.clock is not None:
            self.clock.stop()
        # the trainer's host (first made) closes last: it owns Ray
        for host in reversed(self.hosts):
            host.close()


def iteration_problems(cfg, dataset, k: int) -> list:
    """Iteration k's problems: a seeded draw from the train split, the same for every schedule (and
    for a peer framework run on the same workload, engines/external/trl/)."""
    rng = random.Random(f"{cfg.run.seed}:prompts:{k}")
    return rng.sample(dataset.train, cfg.train.prompts_per_iteration)


def iteration_input(cfg, dataset, tok, k: int) -> IterationInput:
    """The iteration's prompts (iteration_problems) and sampling."""
    problems = iteration_problems(cfg, dataset, k)
    requests = [PromptRequest(i, tok.prompt_ids(dataset.prompt_text(p)))
                for i, p in enumerate(problems)]
    r = cfg.rollout
    sampling = LengthSampling(n=r.group_size, temperature=r.temperature, top_p=r.top_p,
                              max_new_tokens=r.max_new_tokens, seed=cfg.run.seed, iteration=k,
                              response_length=r.response_length,
                              response_length_mean=r.response_length_mean,
                              response_length_sigma=r.response_length_sigma)
    return IterationInput(k, requests, {i: p.answer for i, p in enumerate(problems)}, sampling)


def evaluate(sampler, weights, version: int, cfg, dataset, tok) -> dict:
    """Greedy pass@1 of `weights` on the eval split with `sampler` in this process
    (engines/evaluation.py)."""
    sampler.load_weights(weights, version)
    requests, sampling = eval_inputs(cfg, dataset, tok)
    return score(sampler.generate(requests, sampling), dataset, tok)
