"""Synchronous schedule (VERL's colocated loop): every phase on all devices, one after another.

weight_sync -> rollout (whole batch) -> reward -> old_logprob -> ref_logprob -> advantage -> update
-> optimizer_step. While the last long responses are generated, the rest of the devices' capacity
idles: that bubble is what periodic asynchrony reclaims.
"""
from __future__ import annotations

from rlbench.engines.schedules.common import IterationInput, IterationOutput
from rlbench.stages import Stage


class SyncSchedule:
    name = "sync"

    def __init__(self, trainer, rollout, recorder):
        self.trainer, self.rollout, self.rec = trainer, rollout, recorder

    def run_iteration(self, inp: IterationInput) -> IterationOutput:
        k, tr, rec = inp.iteration, self.trainer, self.rec
        with rec.stage(Stage.WEIGHT_SYNC, k):
            self.rollout.load_weights(tr.weights(), tr.version)
        with rec.stage(Stage.ROLLOUT, k):
            groups = self.rollout.generate(inp.requests, inp.sampling)
        groups.sort(key=lambda g: g.prompt_index)  # dispatch order
        tr.begin()
        tr.train(rec, k, groups, inp.answers)
        version = tr.version
        stats, rewards = tr.finish(rec, k)
        return IterationOutput(groups, rewards, version, stats, [dict(self.rollout.last_stats)])

    def close(self) -> None:
        self.trainer.close()
