"""Compose an engine from the config: the schedule picks the composition, not `if`s in the parts."""
from __future__ import annotations

import copy
import random

from rlbench.engines.rollout.base import PromptRequest, SamplingParams
from rlbench.engines.schedules.common import IterationInput


def make_engine(cfg, policy, tok, t0: float, sink, device):
    """-> (schedule, eval_sampler). The trainer owns `policy`; rollout backends own copies."""
    from rlbench import device as dev
    from rlbench.engines.rollout.sampler import BuiltinSampler
    from rlbench.engines.trainer.trainer import Trainer
    from rlbench.stages import Recorder

    e = cfg.engine
    policy = policy.to(device)
    trainer = Trainer(policy, cfg, tok)
    sampler = BuiltinSampler(copy.deepcopy(policy).eval(), tok.eos_token_id,
                             max_num_seqs=cfg.rollout.max_num_seqs, device=device)
    if e.schedule == "sync":
        from rlbench.engines.schedules.sync import SyncSchedule

        dev.set_threads(e.num_devices if device.type == "cpu" else 1)
        rec = Recorder("colocated", t0, device=device, devices=e.num_devices, sink=sink)
        return SyncSchedule(trainer, sampler, rec), sampler
    from rlbench.engines.rollout.pool import ProcessRolloutPool
    from rlbench.engines.schedules.periodic_async import PeriodicAsyncSchedule

    dev.set_threads(e.train_devices if device.type == "cpu" else 1)
    pool = ProcessRolloutPool(policy, tok.eos_token_id, cfg.rollout.max_num_seqs, e.rollout_devices,
                              device.type, t0, start_timeout_s=e.queue_timeout_s)
    rec = Recorder("trainer", t0, device=device, devices=e.train_devices, sink=sink)
    return PeriodicAsyncSchedule(trainer, pool, rec, e.consume_order, e.queue_timeout_s), sampler


def iteration_input(cfg, dataset, tok, k: int) -> IterationInput:
    """The iteration's prompts: a seeded draw from the train split, the same for every schedule."""
    rng = random.Random(f"{cfg.run.seed}:prompts:{k}")
    problems = rng.sample(dataset.train, cfg.train.prompts_per_iteration)
    requests = [PromptRequest(i, tok.prompt_ids(dataset.prompt_text(p))) for i, p in enumerate(problems)]
    r = cfg.rollout
    sampling = SamplingParams(n=r.group_size, temperature=r.temperature, top_p=r.top_p,
                              max_new_tokens=r.max_new_tokens, seed=cfg.run.seed, iteration=k)
    return IterationInput(k, requests, {i: p.answer for i, p in enumerate(problems)}, sampling)


def evaluate(sampler, weights, version: int, cfg, dataset, tok) -> dict:
    """Greedy pass@1 on the eval split with the GSM8K strict rule."""
    from rlbench.engines.data.reward import gsm8k_reward

    sampler.load_weights(weights, version)
    requests = [PromptRequest(i, tok.prompt_ids(dataset.prompt_text(p))) for i, p in enumerate(dataset.eval)]
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=cfg.rollout.max_new_tokens,
                              seed=cfg.run.seed, greedy=True)
    groups = sampler.generate(requests, sampling)
    correct = sum(gsm8k_reward(tok.decode(g.responses[0]), dataset.eval[g.prompt_index].answer) for g in groups)
    return {"accuracy": correct / len(dataset.eval), "n": len(dataset.eval)}
