"""What one schedule record says (core/schedules/<name>.py holds one, `SCHEDULE`).

Everything that differs between schedules outside their engine code is a field here, so config,
placement, the loss choice, the simulator, the calibration, the ablation tables and `rlbench check`
read the record instead of testing a schedule's name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from rlbench.core.components import Component

# layout: where rollout and training run
# every worker generates and trains its shard of the iteration (VERL's hybrid engine)
COLOCATED = "colocated"
POOLS = "pools"  # a rollout pool feeds a training pool

# loss
PPO = "ppo"  # on-policy samples: dual-clip PPO (engines/trainer/grpo.py PPOLoss)
DECOUPLED = "decoupled"  # stale samples: the decoupled PPO loss (DecoupledPPOLoss)

# the cost model `rlbench simulate` and the calibration run (core/costmodel/simulate.py)
MODEL_COLOCATED = "colocated"  # weight sync + the slowest rank's rollout + training + step
# rollout and training pools inside one iteration (overlap=False: the barrier)
MODEL_POOLS = "pools"
MODEL_BOUNDED = "bounded"  # rollout up to k versions ahead (core/costmodel/bounded.py)

# role: the schedule's place in the built-in ablation tables (bench/run/ablation_table.py), the
# check's switch pairs and `rlbench simulate`'s ladder
REFERENCE = "reference"  # the baseline every speedup is over
PERIODIC = "periodic"  # the async ladder's cell (periodic asynchrony)
BOUNDED = "bounded"  # the staleness sweep
ONE_STEP = "one_step"  # the families ladder's k = 1 rung (bench/experiments/families/cells.py)


def _never(cfg) -> bool:
    return False


def one_step_per_iteration(name: str, why: str) -> Callable:
    """A check refusing several optimizer steps per iteration under schedule `name`."""
    def check(cfg) -> str | None:
        if cfg.train.ppo_mini_batches != 1:
            return f"train.ppo_mini_batches must be 1 with engine.schedule={name}: {why}"
        return None
    return check


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec(Component):
    layout: str  # COLOCATED or POOLS
    model: str  # MODEL_COLOCATED, MODEL_POOLS or MODEL_BOUNDED
    loss: str = PPO
    runs_ahead: bool = False  # rollout of later iterations starts before this one is trained
    # REFERENCE, PERIODIC, BOUNDED, ONE_STEP or None (no built-in ablation names it)
    role: str | None = None
    # Cells it adds at the end of named ablations: {ablation: ((cell name, switches), ...)}.
    cells: dict = field(default_factory=dict)
    # Option values the schedule pins (simulate reads max_staleness from here when present).
    pinned: dict = field(default_factory=dict)
    # True where this config runs the trainer in the driver's process (and every phase, where the
    # schedule's engine has an in-process builder: engines/schedules/__init__.py).
    in_process: Callable = _never
    # Options that make no sense without this schedule: set away from their defaults under another
    # one, the config is refused (schedules.foreign_options) rather than the setting silently
    # ignored.
    owns: tuple[str, ...] = ()

    @property
    def colocated(self) -> bool:
        return self.layout == COLOCATED

    def staleness(self, cfg=None, default: int = 1) -> int:
        """k: the most weight versions a trained sample may lag (0 for the on-policy schedules)."""
        if self.model != MODEL_BOUNDED:
            return 0
        if "max_staleness" in self.pinned:
            return self.pinned["max_staleness"]
        return cfg.engine.max_staleness if cfg is not None else default

    def read(self, cfg):
        """Its options from their config keys, the pinned ones at their pinned values."""
        opts = super().read(cfg)
        return opts.model_copy(update=self.pinned) if self.pinned else opts
