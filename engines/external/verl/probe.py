"""rlbench inside VERL's processes, on any device: VERL's resolved config written where rlbench
reads it, and the cell's turns taken between VERL's steps when the cells of a run take turns
(run.interleave).

Loaded through VERL's plugin hook (VERL_USE_EXTERNAL_MODULES, beside the CPU layer on CPU). One
setting VERL has no config key for is laid over it, for a fair comparison (cost_settings.py
OVERRIDDEN lists it with its reason): its v1 trainer's replay buffer looks for finished samples
every REPLAY_POLL_S instead of every 2 s (a step's rollout wait is otherwise rounded up to the next
2 s: 4 s for a 2.5 s rollout on CPU). The rest acts in the process that logs VERL's metrics
(verl.utils.tracking.Tracking, the trainer's or the recipe's driver actor):

    Tracking(config=...)       the resolved config as JSON at RLBENCH_VERL_CONFIG (the cell's cost
                               settings)
    log(validation, step 0)    ready; before 0          (turns start once VERL is set up and has
                                                        validated)
    log(the k-th train step)   after k-1; before k      (or leave, after the last step)

A turn is asked for on the FIFO `request` of the folder RLBENCH_VERL_GATE and granted by a line on
`reply`; the cell process answers (engines/external/verl/turns.py). Without RLBENCH_VERL_GATE
nothing waits.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from rlbench.engines.external.verl import hooks
from rlbench.engines.external.verl.names import CONFIG_ENV, GATE_ENV, STEPS_ENV, is_training_step


class Turns:
    """The logging process's end of the turn FIFOs: one request line, then block for the reply."""

    def __init__(self, folder: str, steps: int):
        self.folder, self.steps = Path(folder), steps
        self.started, self.trained = False, 0  # turns asked for; training steps logged
        self._w = self._r = None

    def ask(self, line: str) -> None:
        if self._w is None:  # the cell holds both FIFOs open: neither open blocks
            self._w = os.open(self.folder / "request", os.O_WRONLY)
            self._r = os.open(self.folder / "reply", os.O_RDONLY)
        os.write(self._w, (line + "\n").encode())
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = os.read(self._r, 64)
            if not chunk:
                raise RuntimeError("the rlbench cell closed the turn FIFO")
            reply += chunk

    def logged(self, step: int, data: dict) -> None:
        """After VERL logged `data`: its first validation (step 0) starts the turns; the k-th
        training step ends iteration k-1's turn and waits for iteration k's (the fully-async recipe
        numbers its steps by weight version, so they are counted, not read)."""
        if not self.started and step == 0 and not is_training_step(data):
            self.started = True
            self.ask("ready")
            self.ask("before 0")
        elif self.started and is_training_step(data):
            self.trained += 1
            self.ask(f"after {self.trained - 1}")
            self.ask(f"before {self.trained}" if self.trained < self.steps else "leave")


def _tracking(mod) -> None:
    init, log = mod.Tracking.__init__, mod.Tracking.log
    turns = Turns(os.environ[GATE_ENV],
                  int(os.environ.get(STEPS_ENV, "0"))) if os.environ.get(GATE_ENV) else None

    def __init__(self, *args, config=None, **kwargs):
        init(self, *args, config=config, **kwargs)
        path = os.environ.get(CONFIG_ENV)
        if path and config is not None:
            Path(path).write_text(json.dumps(config, indent=1, default=str))

    def logged(self, data, step, *args, **kwargs):
        out = log(self, data, step, *args, **kwargs)
        if turns is not None:
            turns.logged(int(step), data)
        return out

    mod.Tracking.__init__, mod.Tracking.log = __init__, logged


REPLAY_POLL_S = 0.05  # VERL's v1 replay buffer: 2.0 s (verl/trainer/ppo/v1/replay_buffer.py:144)


def _replay_buffer(mod) -> None:
    init = mod.ReplayBuffer.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if "poll_interval" not in kwargs:  # VERL's trainer passes none (trainer_base.py:154-184)
            self.poll_interval = REPLAY_POLL_S

    mod.ReplayBuffer.__init__ = __init__


hooks.after_import({"verl.utils.tracking": [_tracking],
                    "verl.trainer.ppo.v1.replay_buffer": [_replay_buffer]})
