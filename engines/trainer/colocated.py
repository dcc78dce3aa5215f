"""The colocated iteration (VERL's hybrid engine), written once: this process's rollout backend
generates its shard of the iteration with the trainer's current weights, then the trainer trains the
shard and steps.

The sync schedule (engines/schedules/sync/engine.py) runs it in its own process
(engine.sync_layout=single_process) or on every colocated rank (ranks.py, data_parallel), where the
trainer's finish all-reduces first. While the last long responses are generated, the rest of the
devices' capacity idles: that bubble is what periodic asynchrony reclaims.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlbench.core import hooks
from rlbench.core.record.stages import Stage


@dataclass
class ColocatedResult:
    """What one colocated iteration made."""

    groups: list  # its shard's groups, dispatch order
    rewards: dict  # prompt index -> [G]
    trained_version: int  # the weights the gradients were taken at
    stats: dict  # the (all-reduced) step stats
    rollout_stats: dict  # the rollout backend's last_stats


def colocated_iteration(trainer, rollout, rec, k: int, requests: list, sampling,
                        answers: dict) -> ColocatedResult:
    """weight_sync -> rollout (the whole shard) -> trainer.train (reward, log-probs, advantages,
    update) -> trainer.finish (optimizer_step), every stage recorded on rec."""
    with rec.stage(Stage.WEIGHT_SYNC, k):  # local, but a real copy into the rollout engine
        rollout.load_weights(trainer.weights(), trainer.version)
    with rec.stage(Stage.ROLLOUT, k):
        # inside the stage: a planted hang is reported as a hang in rollout
        hooks.call("iteration", k, "rollout")
        groups = rollout.generate(requests, sampling)
    groups.sort(key=lambda g: g.prompt_index)  # dispatch order
    hooks.call("iteration", k, "trainer")
    trainer.begin()
    trainer.train(rec, k, groups, answers)
    version = trainer.version
    stats, rewards = trainer.finish(rec, k)
    return ColocatedResult(groups, rewards, version, stats, dict(rollout.last_stats))
