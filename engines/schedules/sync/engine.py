"""Synchronous schedule (VERL's hybrid engine): every phase on every device, one after another.

weight_sync -> rollout (whole shard) -> reward -> old_logprob -> ref_logprob -> advantage -> update
-> optimizer_step: the colocated iteration, written once in engines/trainer/colocated.py. While the
last long responses are generated, the rest of the devices' capacity idles: that bubble is what
periodic asynchrony reclaims.

- `DataParallelSync` (the default, engine.sync_layout=data_parallel): one colocated rank per device,
  each running the colocated iteration on its shard (prompt i on rank i mod N), gradients
  all-reduced before the one optimizer step (engines/trainer/ranks.py).
- `SyncSchedule`: the colocated iteration in this process (engine.sync_layout=single_process, and
  the tests' in-process reference): the trainer and the rollout backend share its devices.
"""
from __future__ import annotations

from rlbench.core.record.stages import Recorder, Role
from rlbench.engines.rollout.worker import backend_spec, build_backend
from rlbench.engines.schedules.common import IterationInput, IterationOutput
from rlbench.engines.trainer.colocated import colocated_iteration
from rlbench.engines.trainer.trainer import Trainer


def build(options, session):
    """The registered builder (the record in this folder): colocated data-parallel ranks. options:
    SyncOptions (sync_layout=single_process is built by build_in_process instead)."""
    return DataParallelSync(session.trainer(Role.COLOCATED), session.recorder)


def build_in_process(cfg, policy, tok, t0: float, sink, device, placement, make_model):
    """The record's in-process builder (engine.sync_layout=single_process, and the tests' in-process
    reference): trainer and rollout backend in this process, on its devices."""
    worker = placement.slots[0].worker if placement else Role.COLOCATED.value
    rec = Recorder(worker, t0, device=device, devices=cfg.engine.num_devices, sink=sink)
    sampler = build_backend(backend_spec(cfg), policy.config, tok.eos_token_id,
                            cfg.rollout.max_num_seqs,
                            device, make_model, dict(policy.named_parameters()))
    return SyncSchedule(Trainer(policy, cfg, tok), sampler, rec)


class DataParallelSync:
    def __init__(self, trainer, recorder):
        """trainer: a DataParallelTrainer over colocated ranks; recorder: the driver's (events
        route)."""
        self.trainer, self.rec = trainer, recorder

    def run_iteration(self, inp: IterationInput) -> IterationOutput:
        k, tr = inp.iteration, self.trainer
        version = tr.version
        groups, rewards, stats, rollout_stats = tr.colocated_iteration(self.rec, k, inp.requests,
                                                                       inp.sampling,
                                                                       inp.answers)
        return IterationOutput(groups, rewards, version, stats, rollout_stats)

    def close(self) -> None:
        self.trainer.close()


class SyncSchedule:
    def __init__(self, trainer, rollout, recorder):
        self.trainer, self.rollout, self.rec = trainer, rollout, recorder

    def run_iteration(self, inp: IterationInput) -> IterationOutput:
        res = colocated_iteration(self.trainer, self.rollout, self.rec, inp.iteration, inp.requests,
                                  inp.sampling,
                                  inp.answers)
        return IterationOutput(res.groups, res.rewards, res.trained_version, res.stats,
                               [res.rollout_stats])

    def close(self) -> None:
        self.trainer.close()
