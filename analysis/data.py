"""Load a run folder (one cell, or an ablation of cells) into plain objects the report parts share.

Reports only read result files (docs/architecture/result-files.md): this module uses
`rlbench.core.results.schema` readers and nothing of the engines. Every accessor tolerates a cell
that stopped early (status "interrupted"/"failed", zero iterations, empty aggregates, no samples).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd
from rlbench.core.config import RunConfig
from rlbench.core.config_files import recorded_config
from rlbench.core.errors import UserError
from rlbench.core.record.stages import OUTSIDE_STAGES, Stage
from rlbench.core.results import schema

STAGE_ORDER = [s.value for s in Stage]  # one order for every table and plot


@dataclass
class CellData:
    """One cell: its results.json (dict) plus raw events and samples."""

    name: str
    dir: Path
    result: dict
    events: list[dict] = field(default_factory=list)  # StageEvent dicts, times in s since run t0
    samples: list[dict] = field(default_factory=list)  # one per trained sample

    @property
    def iterations(self) -> list[dict]:
        return self.result.get("iterations") or []

    @property
    def aggregates(self) -> dict:
        return self.result.get("aggregates") or {}

    @property
    def switches(self) -> dict:
        return self.result.get("switches") or {}

    @cached_property
    def config(self) -> RunConfig:
        """The cell's resolved config as the typed model it was run with (exit 2 naming the file and
        key where results.json's `config` does not validate)."""
        return recorded_config(self.result)

    @property
    def schedule(self) -> str:
        return self.switches.get("schedule") or self.config.engine.schedule

    @property
    def status(self) -> str:
        return self.result.get("status") or "?"

    @property
    def devices(self) -> int | None:
        """All devices of the cell's run (TPSPD's divisor)."""
        for it in self.iterations:
            if it.get("devices"):
                return int(it["devices"])
        return self.config.engine.num_devices

    def staleness_counts(self) -> Counter:
        """Trained samples by staleness (trained - behaviour version, in weight versions), every
        iteration."""
        return Counter(s["trained_version"] - s["behaviour_version"] for s in self.samples)

    def measured(self) -> list[dict]:
        """Post-warm-up iterations (all of them when every iteration is warm-up, as metrics
        does)."""
        return schema.measured(self.iterations)

    def tpspd(self, key: str = "median") -> float | None:
        """TPSPD (tokens / s / device) from the aggregates: key is median, min or max."""
        return (self.aggregates.get("tpspd") or {}).get(key)


@dataclass
class RunData:
    """A run folder: its cells, reference cell first."""

    path: Path
    kind: str  # "cell" or "ablation"
    name: str
    reference: str
    cells: list[CellData]
    predicted: object = None  # ablation.json "predicted", if any (free form)
    missing: list[str] = field(default_factory=list)  # ablation cells with no results.json
    # contention_probe.json: the cores slowing each other, measured in this run
    probe: dict | None = None

    def cell(self, name: str) -> CellData | None:
        return next((c for c in self.cells if c.name == name), None)

    @property
    def ref(self) -> CellData | None:
        return self.cells[0] if self.cells else None


def load(run_dir, add=()) -> RunData:
    """Read a cell folder or an ablation folder (raises rlbench.core.errors.UserError if it is
    neither), with the cells of the `add` folders appended (merge)."""
    run = _load_one(run_dir)
    return merge(run, [_load_one(p) for p in add]) if add else run


def _load_one(run_dir) -> RunData:
    path = Path(run_dir)
    results = schema.load_run(path)
    cells = [CellData(name=r.get("cell") or Path(r["_dir"]).name, dir=Path(r["_dir"]), result=r,
                      events=schema.load_events(r["_dir"]), samples=schema.load_samples(r["_dir"]))
             for r in results]
    if schema.is_ablation(path):
        abl = schema.read_ablation(path)
        reference = abl.get("reference") or (cells[0].name if cells else "")
        missing = [c["name"] for c in abl.get("cells", []) if not schema.is_cell(path / c["dir"])]
        cells.sort(key=lambda c: c.name != reference)  # stable: reference first, others in order
        return RunData(path, "ablation", abl.get("name") or path.name, reference, cells,
                       abl.get("predicted"), missing, schema.read_contention_probe(path))
    return RunData(path, "cell", cells[0].name, cells[0].name, cells)


def merge(base: RunData, others: list[RunData]) -> RunData:
    """base with the cells of other runs appended (`rlbench report RUN_DIR --add OTHER`): one report
    over several run folders, e.g. a regime map and its natural-tail point; written into base's
    folder."""
    cells = list(base.cells)
    for other in others:
        clash = sorted({c.name for c in other.cells} & {c.name for c in cells})
        if clash:
            raise UserError(f"--add {other.path}: cell name(s) {', '.join(clash)} already in the "
                            "report; only runs with distinct cells (e.g. different --ablation "
                            "names) can be reported together")
        cells += other.cells
    return RunData(base.path, base.kind, " + ".join([base.name, *(o.name for o in others)]),
                   base.reference,
                   cells, base.predicted, base.missing + [m for o in others for m in o.missing],
                   base.probe or next((o.probe for o in others if o.probe), None))


def stages_in(cells: list[CellData]) -> list[str]:
    """Stage names for table columns: every Stage but eval and paused (not part of an iteration), in
    enum order, then any other name found in the aggregates or events."""
    names = [s for s in STAGE_ORDER if s not in OUTSIDE_STAGES]
    extra = {k for c in cells for k in c.aggregates.get("stage_s", {})} | {e["stage"] for c in cells
                                                                           for e in c.events}
    return names + sorted(extra - set(STAGE_ORDER) - OUTSIDE_STAGES)


def workers_in(cells: list[CellData]) -> list[str]:
    """Worker names over all cells: trainer-like workers first, then rollout workers, by name."""
    names = {w for c in cells for w in c.aggregates.get("idle_frac", {})}
    names |= {e["worker"] for c in cells for e in c.events if e["stage"] not in OUTSIDE_STAGES}
    return sorted(names, key=worker_sort_key)


def worker_sort_key(name: str) -> tuple:
    return (name.startswith("rollout"), name)


def get_path(d: dict, dotted: str):
    """d['a']['b'] for 'a.b'; None where a key is missing."""
    for key in dotted.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def read_table(path: Path):
    """A CSV the analysis wrote into a run folder (families.csv, peers.csv) as a DataFrame with None
    for missing values; None where the file is not there (the run is not of that kind)."""
    if not Path(path).is_file():
        return None
    frame = pd.read_csv(path)
    return frame.astype(object).where(frame.notna(), None)
