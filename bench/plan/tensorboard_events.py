"""TensorBoard event files (`trainer.logger=['tensorboard']` in VERL, rlbench's own `--logger
tensorboard`): scalars tagged with VERL's metric names, one value per step; read with the
tensorboard package's EventAccumulator. A folder is read with every event file in it."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rlbench.core.errors import UserError
from rlbench.plan import verl_metrics
from rlbench.plan.logs import StepLog, missing, skipped_note

FORMAT = "tensorboard"
MAGIC = b"events.out.tfevents"


def looks_like(path: Path) -> bool:
    """An event file, or a folder holding one (TFRecord content has no text signature: the name is
    the writer's, which every TensorBoard writer keeps)."""
    if path.is_dir():
        return any(p.name.startswith(MAGIC.decode()) for p in path.iterdir())
    return path.name.startswith(MAGIC.decode())


def _scalars(path: Path) -> dict[int, dict]:
    # inside: tensorboard is a dependency, imported only for event files (a second of import)
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={SCALARS: 0})
    try:
        acc.Reload()
    except Exception as e:  # a truncated or foreign file: the reader's own message, named
        raise UserError(
            f"{path}: not a readable TensorBoard event file ({type(e).__name__}: {e})"
        ) from None
    steps: dict[int, dict] = defaultdict(dict)
    for tag in acc.Tags().get("scalars", []):
        for ev in acc.Scalars(tag):
            steps[int(ev.step)][tag] = ev.value
    return steps


def read(path: Path) -> StepLog:
    by_step = _scalars(path)
    if not by_step:
        raise UserError(f"{path}: no scalars in the TensorBoard event file(s) (a foreign or "
                        "damaged file reads as none)")
    steps, rows, skipped = [], [], []
    for step in sorted(by_step):
        data = by_step[step]
        if verl_metrics.is_training_step(data):
            steps.append(verl_metrics.logged_step(step, data, path, None))
            rows.append(data)
        else:
            skipped.append(f"step {step}")
    if not steps:
        raise missing(path, None, "timing_s/step", "no step's scalars", "a training step's metrics")
    return StepLog(FORMAT, path, steps, verl_metrics.keys_read(rows), verl_metrics.gpus(rows),
                   notes=["event files give no line numbers: errors name the step"] +
                   skipped_note(skipped, "step(s) " + verl_metrics.SKIPPED))
