"""Which log a path is, found by its content (the name only for TensorBoard's binary event files),
and its reader. A folder: a run or cell folder (rlbench), a checkpoint folder (trainer_state.json),
or a folder of event files."""
from __future__ import annotations

import json
from pathlib import Path

from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.plan import rlbench_results, tensorboard_events, trl_state, verl_console, verl_jsonl
from rlbench.plan.logs import StepLog

FORMATS = ("rlbench results.json (or its run folder)",
           "VERL console lines (step:N - key:value - ...)",
           "VERL file logger JSONL", "TensorBoard event files", "TRL trainer_state.json")


def _folder(path: Path) -> Path:
    """A folder -> the file (or folder) in it that a reader takes."""
    if (path / schema.RESULTS).is_file() or schema.is_ablation(path):
        return path
    if (path / "trainer_state.json").is_file():
        return path / "trainer_state.json"
    if tensorboard_events.looks_like(path):
        return path
    raise UserError(f"{path}: a folder with none of results.json, ablation.json, "
                    "trainer_state.json or events.out.tfevents.* in it")


def read_log(path: Path) -> StepLog:
    """Any supported log -> StepLog; exit 2 naming the file where it is none of them."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder")
    if path.is_dir():
        path = _folder(path)
        if path.is_dir():
            return rlbench_results.read(path) if not tensorboard_events.looks_like(path) \
                else tensorboard_events.read(path)
    if tensorboard_events.looks_like(path):
        return tensorboard_events.read(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: binary, and not a TensorBoard event file (allowed: "
                        f"{'; '.join(FORMATS)})") from None
    return _from_text(path, text)


def _from_text(path: Path, text: str) -> StepLog:
    doc = None
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None  # JSON lines, or a cut-off document (the readers below name the line)
    if rlbench_results.looks_like(doc):
        return rlbench_results.read(path)
    if trl_state.looks_like(doc):
        return trl_state.read(path, text, doc)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if verl_jsonl.looks_like(first):
        return verl_jsonl.read(path)
    if verl_console.looks_like(text):
        return verl_console.read(path)
    if doc is None and text.lstrip().startswith("{"):
        raise UserError(f"{path}:1: JSON that does not parse, and not one object per line")
    raise UserError(f"{path}: not a log plan reads (allowed: {'; '.join(FORMATS)})")
