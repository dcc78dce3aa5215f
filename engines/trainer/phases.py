"""The trainer's group pipeline, phase by phase: what every schedule and every data-parallel rank runs."""
from __future__ import annotations

from rlbench.engines.rollout.base import Group
from rlbench.record import progress
from rlbench.record.stages import Stage


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
    if trainer.needs_old_pass:  # not with tri-model (old = detached policy) nor A-3PO's loglinear pi_prox
        with rec.stage(Stage.OLD_LOGPROB, k):
            for mb in mbs:
                trainer.old_logprobs(mb)
                progress.beat()  # per micro-batch: a long stage still shows progress to the watchdog
    if trainer.plan.separate_phases:
        with rec.stage(Stage.REF_LOGPROB, k):
            for mb in mbs:
                trainer.ref_logprobs(mb)
                progress.beat()
    with rec.stage(Stage.UPDATE, k):
        for mb in mbs:
            trainer.accumulate(mb)
            progress.beat()
    return rewards
