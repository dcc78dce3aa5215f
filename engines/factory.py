"""Compose an engine from the config: the schedule picks the composition, not `if`s in the parts."""
from __future__ import annotations

import copy
import random

from rlbench.engines.rollout.base import PromptRequest, SamplingParams
from rlbench.engines.schedules.common import IterationInput


def make_engine(cfg, policy, tok, t0: float, sink, device, dataset=None):
    """-> (schedule, eval_sampler). The trainer owns `policy`; rollout backends own copies.

    `dataset`: bounded_async reads iterations ahead of the runner; without it, it is loaded again from
    the config (the same seeded split)."""
    from rlbench import device as dev
    from rlbench.engines.rollout.worker import BUILTIN, backend_spec, build_backend, export_backend
    from rlbench.stages import Recorder

    e = cfg.engine
    policy = policy.to(device)
    spec = backend_spec(cfg)
    export_backend(spec)  # rollout worker processes build the same backend
    # sync: the configured backend rolls out and evaluates; otherwise rollout runs in the workers and
    # this evaluation sampler stays the built-in one.
    sampler = build_backend(spec if e.schedule == "sync" else BUILTIN, policy.config, tok.eos_token_id,
                            cfg.rollout.max_num_seqs, device, lambda: copy.deepcopy(policy).eval())
    dev.set_threads(e.training_devices if device.type == "cpu" else 1)
    trainer = _trainer(cfg, policy, tok, device, t0)
    if e.schedule == "sync":
        from rlbench.engines.schedules.sync import SyncSchedule

        rec = Recorder("colocated", t0, device=device, devices=e.num_devices, sink=sink)
        return SyncSchedule(trainer, sampler, rec), sampler
    from rlbench.engines.schedules.periodic_async import PeriodicAsyncSchedule

    try:
        pool = _rollout_pool(cfg, policy, tok, device, t0)
    except BaseException:
        trainer.close()
        raise
    # With remote ranks this process only publishes weights and hands groups on: it is the driver.
    rec = Recorder("trainer" if e.backend == "local" else "driver", t0, device=device, devices=e.train_devices,
                   sink=sink)
    if e.schedule == "bounded_async":
        from rlbench.engines.schedules.bounded_async import BoundedAsyncSchedule

        future = _future_inputs(cfg, tok, dataset)
        return BoundedAsyncSchedule(trainer, pool, rec, future, cfg.run.iterations, e.max_staleness,
                                    e.consume_order, e.queue_timeout_s), sampler
    return PeriodicAsyncSchedule(trainer, pool, rec, e.consume_order, e.queue_timeout_s), sampler


def _trainer(cfg, policy, tok, device, t0: float):
    """The local Trainer, or (engine.backend=ray) train_ranks data-parallel Ray actors shaped like it.

    The Ray instance, when this run starts one, is sized for every actor of the run (CPU: all devices)."""
    e = cfg.engine
    if e.backend == "local":
        from rlbench.engines.trainer.trainer import Trainer

        return Trainer(policy, cfg, tok)
    from rlbench.engines.trainer.distributed import DataParallelTrainer

    return DataParallelTrainer(policy, cfg, tok, e.train_ranks, device.type, t0, devices=e.training_devices,
                               ray_address=e.ray_address, num_cpus=e.num_devices if device.type == "cpu" else None,
                               start_timeout_s=e.queue_timeout_s)


def _rollout_pool(cfg, policy, tok, device, t0: float):
    """The rollout pool of the async schedules: local worker processes, or Ray actors (engine.backend=ray)."""
    e = cfg.engine
    args = (policy, tok.eos_token_id, cfg.rollout.max_num_seqs, e.rollout_devices, device.type, t0)
    if e.backend == "ray":
        from rlbench.engines.rollout.ray_pool import RayRolloutPool

        return RayRolloutPool(*args, start_timeout_s=e.queue_timeout_s, ray_address=e.ray_address)
    from rlbench.engines.rollout.pool import ProcessRolloutPool

    return ProcessRolloutPool(*args, start_timeout_s=e.queue_timeout_s)


def _future_inputs(cfg, tok, dataset):
    """m -> IterationInput of iteration m, for a schedule that dispatches ahead of the runner."""
    if dataset is None:
        from rlbench.engines.data.source import load_dataset

        dataset = load_dataset(cfg.data, cfg.run.seed)
    return lambda m: iteration_input(cfg, dataset, tok, m)


def iteration_input(cfg, dataset, tok, k: int) -> IterationInput:
    """The iteration's prompts: a seeded draw from the train split, the same for every schedule."""
    from rlbench.engines.rollout.sampling import LengthSampling

    rng = random.Random(f"{cfg.run.seed}:prompts:{k}")
    problems = rng.sample(dataset.train, cfg.train.prompts_per_iteration)
    requests = [PromptRequest(i, tok.prompt_ids(dataset.prompt_text(p))) for i, p in enumerate(problems)]
    r = cfg.rollout
    sampling = LengthSampling(n=r.group_size, temperature=r.temperature, top_p=r.top_p,
                              max_new_tokens=r.max_new_tokens, seed=cfg.run.seed, iteration=k,
                              response_length=r.response_length, response_length_mean=r.response_length_mean,
                              response_length_sigma=r.response_length_sigma)
    return IterationInput(k, requests, {i: p.answer for i, p in enumerate(problems)}, sampling)


def evaluate(sampler, weights, version: int, cfg, dataset, tok) -> dict:
    """Greedy pass@1 on the eval split with the GSM8K strict rule (accuracy), plus two diagnostics: the
    share of responses the strict rule can read an answer from (format_rate), and pass@1 whatever the
    answer's format (accuracy_any_format)."""
    from rlbench.engines.data.reward import any_format_correct, extract_solution, gsm8k_reward

    sampler.load_weights(weights, version)
    requests = [PromptRequest(i, tok.prompt_ids(dataset.prompt_text(p))) for i, p in enumerate(dataset.eval)]
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=cfg.rollout.max_new_tokens,
                              seed=cfg.run.seed, greedy=True)
    groups = sampler.generate(requests, sampling)
    texts = [(tok.decode(g.responses[0]), dataset.eval[g.prompt_index].answer) for g in groups]
    n = len(dataset.eval)
    return {"accuracy": sum(gsm8k_reward(t, a) for t, a in texts) / n, "n": n,
            "format_rate": sum(extract_solution(t) is not None for t, _ in texts) / n,
            "accuracy_any_format": sum(any_format_correct(t, a) for t, a in texts) / n}
