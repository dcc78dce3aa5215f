"""What each TRL rank writes as it goes, under <cell>/trl/rank<r>/, and how the adapter reads it
back.

JSONL lines are appended and flushed as they happen (rlbench's JsonlAppender), so a rank that dies
keeps every finished iteration: events.jsonl (StageEvents), windows.jsonl (iteration k's start and
end on this rank, seconds since the cell's t0), samples.jsonl (one row per trained sample), and on
rank 0 also logs.jsonl (TRL's own per-step log dict) and evals.jsonl (rlbench's evaluation);
observed.json holds what the rank was given (cores, threads), and on rank 0 the model's shape and
the device.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rlbench.core.results import schema

STREAMS = ("events", "windows", "samples", "logs", "evals")


def rank_folder(folder: Path, rank: int) -> Path:
    return Path(folder) / f"rank{rank}"


class RankFiles:
    def __init__(self, folder: Path, rank: int):
        self.folder = rank_folder(folder, rank)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._out = {name: schema.JsonlAppender(self.folder / f"{name}.jsonl") for name in STREAMS}

    def event(self, ev) -> None:
        """The Recorder's sink."""
        self._out["events"].write(asdict(ev))

    def window(self, k: int, start: float, end: float) -> None:
        self._out["windows"].write({"iteration": k, "start": start, "end": end})

    def samples(self, rows: list[dict]) -> None:
        for row in rows:
            self._out["samples"].write(row)

    def log(self, step: int, logs: dict) -> None:
        self._out["logs"].write({"step": step, **logs})

    def eval(self, row: dict) -> None:
        self._out["evals"].write(row)

    def observed(self, info: dict) -> None:
        schema.atomic_write_json(self.folder / "observed.json", info)

    def close(self) -> None:
        for f in self._out.values():
            f.close()


def read_rank(folder: Path, rank: int) -> dict:
    """A rank's streams (lists of dicts; missing files read as empty) and its observed.json (or
    None)."""
    base = rank_folder(folder, rank)
    out = {name: schema.read_jsonl(base / f"{name}.jsonl") for name in STREAMS}
    obs = base / "observed.json"
    out["observed"] = json.loads(obs.read_text()) if obs.is_file() else None
    return out
