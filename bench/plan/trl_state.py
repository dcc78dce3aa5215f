"""TRL's trainer_state.json (transformers' TrainerState, written with every checkpoint):
`log_history`, one entry per logging step. GRPOTrainer (trl 1.16, trl/trainer/grpo_trainer.py) logs,
averaged over the logging window:

    step_time                    seconds of one optimizer step, generation included (required)
    num_tokens                   prompt + completion tokens seen so far (cumulative; required)
    completions/mean_length      response tokens, mean (required); completions/max_length the
                                 longest

It does not split generation from training (its profiling timers go to W&B / MLflow / Trackio, not
to the log history), nor log prompt lengths or the samples per step: the plan splits the step by a
rollout-share assumption, and takes the samples per step as train_batch_size (the file's own key) x
GPUs."""
from __future__ import annotations

import json
import re
from pathlib import Path

from rlbench.core.costmodel.fromlog import LoggedStep
from rlbench.core.errors import UserError
from rlbench.plan.logs import NON_NEGATIVE, StepLog, checked, missing, skipped_note

FORMAT = "trl"
REQUIRED = ("step_time", "num_tokens", "completions/mean_length")
OPTIONAL = ("completions/max_length",)


def looks_like(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("log_history"), list)


def _lines(text: str) -> list[int]:
    """Line of each `"step":` in the file, in order: the i-th log_history entry's line (its own
    key)."""
    starts = [m.start() for m in re.finditer(r'"step"\s*:', text)]
    return [text.count("\n", 0, s) + 1 for s in starts]


def _step(e: dict, line: int | None, prev_step: int, prev_tokens: float,
          path: Path) -> tuple[LoggedStep, float]:
    """One training entry -> (LoggedStep, num_tokens so far): every value read finite and in its
    range (step_time and the mean length > 0, num_tokens >= 0 and growing), or an error naming the
    file, the line and TRL's key."""
    for key in REQUIRED:
        if e.get(key) is None:
            raise missing(path, line, key, f"log_history step {e['step']}",
                          "needed: " + ", ".join(REQUIRED))
    s = e["step"]
    if not isinstance(s, int) or isinstance(s, bool) or s <= prev_step:
        raise UserError(f"{path}:{line}: 'step' is {s!r}; allowed: an integer above the entry "
                        f"before's ({prev_step})")
    seen = checked(e["num_tokens"], path, line, "num_tokens", NON_NEGATIVE, s)
    if seen <= prev_tokens:
        raise UserError(f"{path}:{line}: 'num_tokens' is {seen:g} at step {s}, not above the entry "
                        f"before's ({prev_tokens:g}); allowed: the cumulative count, growing with "
                        f"every step")
    longest = e.get("completions/max_length")
    return LoggedStep(step=s, wall_s=checked(e["step_time"], path, line, "step_time", step=s),
                      tokens=(seen - prev_tokens) / (s - prev_step),
                      response_mean=checked(e["completions/mean_length"], path, line,
                                            "completions/mean_length", step=s),
                      response_max=None if longest is None else
                      checked(longest, path, line, "completions/max_length", step=s)), seen


def read(path: Path, text: str, doc: dict) -> StepLog:
    entries = [e for e in doc["log_history"] if isinstance(e, dict) and "step" in e]
    lines = _lines(text)
    line_of = {id(e): lines[i] if i < len(lines) else None for i, e in enumerate(entries)}
    train = [e for e in entries if "step_time" in e or "num_tokens" in e
             or "completions/mean_length" in e]
    if not train:
        raise missing(path, None, "step_time", "no log_history entry",
                      "GRPOTrainer's training logs")
    steps, prev_step, prev_tokens = [], 0, 0.0
    for e in train:
        step, prev_tokens = _step(e, line_of[id(e)], prev_step, prev_tokens, path)
        steps.append(step)
        prev_step = step.step
    per = doc.get("train_batch_size")
    if per is not None and (not isinstance(per, int) or isinstance(per, bool) or per < 1):
        raise UserError(f"{path}: 'train_batch_size' is {per!r}; allowed: an integer >= 1 (samples "
                        f"per step per GPU)")
    trained = {id(e) for e in train}
    skipped = [f"line {line_of[id(e)]} (step {e['step']})" for e in entries if id(e) not in trained]
    keys = [k for k in (*REQUIRED, *OPTIONAL) if any(k in e for e in train)]
    return StepLog(FORMAT, path, steps, keys + ["train_batch_size"],
                   notes=["TRL logs no generation/training split: the step is split by the "
                          "rollout-share assumption",
                          "TRL logs no prompt length: prompt = tokens / samples - response"] +
                   skipped_note(skipped,
                                "log_history entr(ies) with none of step_time, num_tokens, "
                                         "completions/mean_length (evaluation or the closing "
                                         "summary)"),
                   extra={"train_batch_size": per, "logging_steps": doc.get("logging_steps")},
                   no_devices="TRL's trainer_state.json does not record how many GPUs the run used "
                              "(its 'train_batch_size' is per GPU): give --gpus N")
