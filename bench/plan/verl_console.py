"""VERL's console logger (`trainer.logger=['console']`, verl/utils/logger/aggregate_logger.py): one
line per step, `step:N - key:value - key:value ...` (numbers as pprint writes them; under Ray the
line may carry a `(TaskRunner pid=...)` prefix)."""
from __future__ import annotations

import re
from pathlib import Path

from rlbench.core.errors import UserError
from rlbench.plan import verl_metrics
from rlbench.plan.logs import StepLog, missing, skipped_note

FORMAT = "verl-console"
LINE = re.compile(r"(?:^|\s)step:(\d+) - (.*)$")
NUMPY = re.compile(r"^np\.\w+\((.*)\)$")  # numpy 2 scalars print as np.float64(1.5)


def looks_like(text: str) -> bool:
    return any(LINE.search(line) for line in text.splitlines()[:2000])


def _pairs(body: str, path: Path, line: int) -> dict:
    out = {}
    for item in body.split(" - "):
        key, sep, value = item.rpartition(":")
        if not sep or not key:
            raise UserError(f"{path}:{line}: {item!r} is not key:value (VERL's console writes "
                            "`step:N - key:value - ...`)")
        value = value.strip()
        m = NUMPY.match(value)
        out[key.strip()] = m.group(1) if m else value
    return out


def read(path: Path) -> StepLog:
    steps, rows, skipped = [], [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line, text in enumerate(f, 1):
            m = LINE.search(text.rstrip("\n"))
            if not m:
                continue  # other output between the metric lines
            data = _pairs(m.group(2), path, line)
            if verl_metrics.is_training_step(data):
                steps.append(verl_metrics.logged_step(int(m.group(1)), data, path, line))
                rows.append(data)
            else:
                skipped.append(f"line {line} (step {m.group(1)})")
    if not steps:
        raise missing(path, None, "timing_s/step", "no `step:N - ...` line",
                      "a training step's metrics")
    return StepLog(FORMAT, path, steps, verl_metrics.keys_read(rows), verl_metrics.gpus(rows),
                   notes=skipped_note(skipped, "`step:N` line(s) " + verl_metrics.SKIPPED))
