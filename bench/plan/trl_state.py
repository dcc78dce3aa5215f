"""TRL's trainer_state.json (transformers' TrainerState, written with every checkpoint): `log_history`, one
entry per logging step. GRPOTrainer (trl 1.16, trl/trainer/grpo_trainer.py) logs, averaged over the
logging window:

    step_time                    seconds of one optimizer step, generation included (required)
    num_tokens                   prompt + completion tokens seen so far (cumulative; required)
    completions/mean_length      response tokens, mean (required); completions/max_length the longest

It does not split generation from training (its profiling timers go to W&B / MLflow / Trackio, not to the
log history), nor log prompt lengths or the samples per step: the plan splits the step by a rollout-share
assumption, and takes the samples per step as train_batch_size (the file's own key) x GPUs."""
from __future__ import annotations

import json
import re
from pathlib import Path

from rlbench.core.costmodel.fromlog import LoggedStep
from rlbench.core.errors import UserError
from rlbench.plan.logs import StepLog, missing, number

FORMAT = "trl"
REQUIRED = ("step_time", "num_tokens", "completions/mean_length")
OPTIONAL = ("completions/max_length",)


def looks_like(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("log_history"), list)


def _lines(text: str) -> list[int]:
    """Line of each `"step":` in the file, in order: the i-th log_history entry's line (its own key)."""
    starts = [m.start() for m in re.finditer(r'"step"\s*:', text)]
    return [text.count("\n", 0, s) + 1 for s in starts]


def read(path: Path, text: str, doc: dict) -> StepLog:
    entries = [e for e in doc["log_history"] if isinstance(e, dict) and "step" in e]
    lines = _lines(text)
    line_of = {id(e): lines[i] if i < len(lines) else None for i, e in enumerate(entries)}
    train = [e for e in entries if "step_time" in e or "num_tokens" in e or "completions/mean_length" in e]
    if not train:
        raise missing(path, None, "step_time", "no log_history entry", "GRPOTrainer's training logs")
    steps, prev_step, prev_tokens = [], 0, 0.0
    for e in train:
        line = line_of[id(e)]
        for key in REQUIRED:
            if e.get(key) is None:
                raise missing(path, line, key, f"log_history step {e['step']}", "needed: " + ", ".join(REQUIRED))
        s, seen = int(e["step"]), number(e["num_tokens"], path, line, "num_tokens")
        if s <= prev_step or seen < prev_tokens:
            raise UserError(f"{path}:{line}: step {s} or num_tokens {seen:g} goes backwards")
        longest = e.get("completions/max_length")
        steps.append(LoggedStep(step=s, wall_s=number(e["step_time"], path, line, "step_time"),
                                tokens=(seen - prev_tokens) / (s - prev_step),
                                response_mean=number(e["completions/mean_length"], path, line,
                                                     "completions/mean_length"),
                                response_max=None if longest is None else float(longest)))
        prev_step, prev_tokens = s, seen
    keys = [k for k in (*REQUIRED, *OPTIONAL) if any(k in e for e in train)]
    return StepLog(FORMAT, path, steps, keys + ["train_batch_size"],
                   notes=["TRL logs no generation/training split: the step is split by the rollout-share "
                          "assumption", "TRL logs no prompt length: prompt = tokens / samples - response"],
                   extra={"train_batch_size": doc.get("train_batch_size"),
                          "logging_steps": doc.get("logging_steps")})
