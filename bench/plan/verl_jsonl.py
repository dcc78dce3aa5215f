"""VERL's file logger (`trainer.logger=['file']`, verl/utils/tracking.py FileLogger): one JSON
object per line, `{"step": N, "data": {metric: value}}`; step 0 holds the validation before
training."""
from __future__ import annotations

import json
from pathlib import Path

from rlbench.core.errors import UserError
from rlbench.plan import verl_metrics
from rlbench.plan.logs import StepLog, missing, skipped_note

FORMAT = "verl-jsonl"


def looks_like(first_line: str) -> bool:
    try:
        row = json.loads(first_line)
    except ValueError:
        return False
    return isinstance(row, dict) and "step" in row and isinstance(row.get("data"), dict)


def read(path: Path) -> StepLog:
    steps, rows, skipped = [], [], []
    with open(path, encoding="utf-8") as f:
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except ValueError:
                raise UserError(f"{path}:{line}: not a JSON object (VERL's file logger writes one "
                                "per line)") from None
            if not isinstance(row, dict) or "data" not in row:
                raise missing(path, line, "data", "the line",
                              'each line is {"step": N, "data": {...}}')
            if "step" not in row:
                raise missing(path, line, "step", "the line",
                              'each line is {"step": N, "data": {...}}')
            if not isinstance(row["step"], int) or isinstance(row["step"], bool):
                raise UserError(f"{path}:{line}: 'step' is {row['step']!r}; allowed: an integer")
            if verl_metrics.is_training_step(row["data"]):
                steps.append(verl_metrics.logged_step(int(row["step"]), row["data"], path, line))
                rows.append(row["data"])
            else:
                skipped.append(f"line {line} (step {row['step']})")
    if not steps:
        raise missing(path, None, "timing_s/step", "no line", "a training step's metrics")
    return StepLog(FORMAT, path, steps, verl_metrics.keys_read(rows), verl_metrics.gpus(rows),
                   notes=skipped_note(skipped, "line(s) " + verl_metrics.SKIPPED))
