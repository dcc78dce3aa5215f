"""What both schedules share: the per-iteration input/output and the trainer's group pipeline.

Matching code in the two schedules keeps the same names and order (STYLE.md 3).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rlbench.engines.rollout.base import Group, PromptRequest, SamplingParams
from rlbench.stages import Stage


@dataclass
class IterationInput:
    iteration: int
    requests: list[PromptRequest]
    answers: dict[int, str]  # prompt index -> ground truth
    sampling: SamplingParams


@dataclass
class IterationOutput:
    groups: list[Group]  # in the order they were trained
    rewards: dict[int, list[float]]  # prompt index -> [G]
    trained_version: int  # version of the weights the gradients were taken at
    train_stats: dict
    rollout_stats: list[dict] = field(default_factory=list)  # per rollout worker, sampler.last_stats


def train_phases(trainer, rec, k: int, groups: list[Group], answers: dict[int, str]) -> dict[int, list[float]]:
    """Reward, old/ref log-probs, advantages and gradient accumulation for groups, phase by phase.

    The sync schedule calls this once with the whole batch (VERL's phases); the periodic-async
    consumer calls it with one group at a time as groups arrive. Same code, so same numbers.
    """
    rewards: dict[int, list[float]] = {}
    with rec.stage(Stage.REWARD, k):
        scores = [trainer.rewards(g, answers[g.prompt_index]) for g in groups]
    mbs = []
    with rec.stage(Stage.ADVANTAGE, k):
        for g, r in zip(groups, scores):
            rewards[g.prompt_index] = r.tolist()
            mbs += trainer.micro_batches(g, trainer.advantages(r))
    if trainer.plan.separate_phases:
        with rec.stage(Stage.OLD_LOGPROB, k):
            for mb in mbs:
                trainer.old_logprobs(mb)
        with rec.stage(Stage.REF_LOGPROB, k):
            for mb in mbs:
                trainer.ref_logprobs(mb)
    with rec.stage(Stage.UPDATE, k):
        for mb in mbs:
            trainer.accumulate(mb)
    return rewards
