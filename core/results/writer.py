"""Writes one cell's result folder as the run goes (schema in rlbench.core.results.schema)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rlbench.core.results import schema


class CellWriter:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in (schema.EVENTS, schema.ITERATIONS, schema.SAMPLES):
            (self.folder / name).unlink(missing_ok=True)
        self._events = schema.JsonlAppender(self.folder / schema.EVENTS)
        self._iterations = schema.JsonlAppender(self.folder / schema.ITERATIONS)
        self._samples = schema.JsonlAppender(self.folder / schema.SAMPLES)
        self.pending_events: list[dict] = []  # events of the iteration in progress

    def event(self, ev) -> None:
        d = asdict(ev)
        self._events.write(d)
        self.pending_events.append(d)

    def take_events(self, iteration: int) -> list[dict]:
        mine = [e for e in self.pending_events if e["iteration"] == iteration]
        self.pending_events = [e for e in self.pending_events if e["iteration"] != iteration]
        return mine

    def iteration(self, rec) -> None:
        self._iterations.write(rec)

    def samples(self, rows: list[dict]) -> None:
        for r in rows:
            self._samples.write(r)

    def results(self, obj: dict) -> Path:
        path = self.folder / schema.RESULTS
        # rewritten every iteration by the cell's driver
        schema.atomic_write_json(path, obj, compact=True)
        return path

    def close(self) -> None:
        for f in (self._events, self._iterations, self._samples):
            f.close()
