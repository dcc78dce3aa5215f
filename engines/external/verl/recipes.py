"""What VERL runs in a cell: its synchronous trainer or one of its asynchronous recipes, and the
devices of each.

    verl                VERL's GRPO trainer (verl.trainer.main_ppo, trainer.v1.trainer_mode=sync):
                        the hybrid
                        engine, every device training and rolling out (rlbench's sync layout)
    verl_one_step_off   verl/experimental/one_step_off_policy: rollout on its own devices one step
                        ahead of the
                        trainer (staleness 1), weights to the rollout workers after every step
    verl_fully_async    verl/experimental/fully_async_policy: a rollouter streaming samples to the
                        trainer, a
                        weight sync every trigger_parameter_sync_step steps, at most
                        staleness_threshold of a batch stale, partial rollout (interrupted
                        generations resumed with new weights) on or off

The separated recipes take rlbench's async split: engine.rollout_devices for rollout,
engine.train_devices for training, and move weights with rlbench's host-memory checkpoint engine on
CPU (cpu/checkpoint.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from rlbench.core.errors import UserError
from rlbench.core.record.stages import Stage

CHECKPOINT = "rlbench.engines.external.verl.cpu.checkpoint"  # VERL's checkpoint-engine plugin point
ROLLOUT = "actor_rollout_ref.rollout"


@dataclass(frozen=True)
class VerlOptions:
    """VERL's own settings a cell varies (no rlbench config key holds them)."""

    recipe: str = "sync"  # sync | one_step_off | fully_async
    staleness: float = 0.0  # fully_async: async_training.staleness_threshold
    partial_rollout: bool = False  # fully_async: async_training.partial_rollout
    sync_every: int = 1  # fully_async: async_training.trigger_parameter_sync_step

    def __post_init__(self):
        if self.recipe not in MODULES:
            raise UserError(f"VERL recipe {self.recipe!r}: allowed: {', '.join(MODULES)}")

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def separate(self) -> bool:
        """Trainer and rollout on devices of their own."""
        return self.recipe != "sync"


MODULES = {"sync": "verl.trainer.main_ppo",
           "one_step_off": "verl.experimental.one_step_off_policy.main_ppo",
           "fully_async": "verl.experimental.fully_async_policy.fully_async_main"}


def overrides(options: VerlOptions, cfg, kind: str) -> dict[str, object]:
    """The recipe's own keys over the translation: its device pools, and on CPU the weight
    transfer."""
    if not options.separate:
        return {}
    e = cfg.engine
    # the one-step-off recipe's config finds VERL's base config by a path relative to VERL's
    # repository (one_step_off_policy/config/one_step_off_ppo_trainer.yaml:3); the installed package
    # has it by name
    out = {"hydra.searchpath": ["pkg://verl.trainer.config"],
           "actor_rollout_ref.hybrid_engine": False, "trainer.n_gpus_per_node": e.train_devices,
           "rollout.nnodes": 1, "rollout.n_gpus_per_node": e.rollout_devices}
    if kind == "cpu":
        out.update({f"{ROLLOUT}.checkpoint_engine.backend": "cpu",
                    f"{ROLLOUT}.checkpoint_engine.custom_backend_module": CHECKPOINT})
    if options.recipe == "fully_async":
        out.update(_fully_async(options, cfg))
    return out


def _fully_async(options: VerlOptions, cfg) -> dict[str, object]:
    """The fully-async recipe's keys: its staleness, partial rollout and sync period, the same
    samples per step."""
    t = cfg.train
    # the rollouter reads one prompt at a time and the trainer takes a mini-batch of samples as they
    # arrive (fully_async_rollouter.py:351): no train batch; ppo_mini_batch_size stays the
    # iteration's prompts
    return {"data.train_batch_size": 0, "data.gen_batch_size": 1,
            "async_training.staleness_threshold": options.staleness,
            "async_training.partial_rollout": options.partial_rollout,
            "async_training.trigger_parameter_sync_step": options.sync_every,
            "async_training.require_batches": 1, "rollout.n": cfg.rollout.group_size,
            "rollout.total_rollout_steps": (cfg.run.iterations + reads_ahead(options))
                                           * t.prompts_per_iteration}


def reads_ahead(options: VerlOptions) -> int:
    """Iterations of prompts a recipe is given beyond the run's: the fully-async recipe logs a
    step's metrics with the next weight sync, and its last step's only where the last version is no
    multiple of trainer.test_freq (fully_async_trainer.py:529), so it trains one more step than the
    run measures."""
    return 1 if options.recipe == "fully_async" else 0


def throughput_gpus(options: VerlOptions, cfg) -> int | None:
    """What VERL's perf/throughput divides by, where not every device of the run: its one-step-off
    recipe counts the trainer's pool alone (verl/experimental/separation/ray_trainer.py:742,
    resource_pool_manager.get_n_gpus()), though the rollout's devices are the run's as much (the
    fully-async recipe counts both: fully_async_trainer.py:170). rlbench's TPSPD divides by all of
    them."""
    return cfg.engine.train_devices if options.recipe == "one_step_off" else None


def stage_devices(options: VerlOptions, cfg):
    """stage -> the devices it holds in a step: every device in VERL's hybrid engine; in a separated
    recipe its rollout pool generates and its training pool trains (the weight sync joins both)."""
    e = cfg.engine

    def devices(stage: Stage) -> int:
        if not options.separate or stage == Stage.WEIGHT_SYNC:
            return e.num_devices
        return e.rollout_devices if stage == Stage.ROLLOUT else e.train_devices

    return devices
