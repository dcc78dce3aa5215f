"""Result files: the contract between engines, reports and CI (docs/architecture/result-files.md).

A *cell* folder (one engine run) holds:
  results.json     - schema_version, kind="cell", cell name, resolved config, provenance, status,
                     iterations (list of IterationRecord dicts), evals, aggregates, rollout stats
  events.jsonl     - one StageEvent per line (worker, stage, iteration, start, end, devices)
  iterations.jsonl - one IterationRecord per line, appended and flushed as each iteration ends
  samples.jsonl    - one line per trained sample: iteration, prompt, sample, lengths, reward,
                     behaviour_version, trained_version (partial rollout, where a response mixes
                     versions: behaviour_version is its oldest token's, plus
                     behaviour_version_newest and tokens_by_version)
An *ablation* folder holds ablation.json (kind="ablation": the cells, their switches, which cell is
the reference) and one cell folder per cell.

JSON files are written atomically (temp file + rename); JSONL lines are appended and flushed, so an
interrupted run keeps everything it measured. Readers here are dependency-free (no torch).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlbench.core.errors import UserError

SCHEMA_VERSION = 1

RESULTS = "results.json"
EVENTS = "events.jsonl"
ITERATIONS = "iterations.jsonl"
SAMPLES = "samples.jsonl"
ABLATION = "ablation.json"
# the regime map's calibration step (bench/experiments/regime/probe.py)
CONTENTION_PROBE = "contention_probe.json"

# Multi-seed runs (`--seeds`): the cell `sync` of seed 2 is named and stored as `sync@seed2`;
# ablation.json then lists "seeds" and each cell's base "cell" and "seed".
_SEEDED = re.compile(r"^(?P<cell>.+)@seed(?P<seed>-?\d+)$")


def seeded_name(cell: str, seed: int) -> str:
    return f"{cell}@seed{seed}"


def split_seeded(name: str) -> tuple[str, int | None]:
    """'sync@seed2' -> ('sync', 2); a name without the suffix -> (name, None)."""
    m = _SEEDED.match(name)
    return (m["cell"], int(m["seed"])) if m else (name, None)


@dataclass
class IterationRecord:
    iteration: int
    start: float  # s since run t0: start of the iteration (weight sync)
    end: float  # s since run t0: end of the optimizer step
    wall_s: float
    num_samples: int
    prompt_tokens: int  # summed over samples (a prompt counts once per sample, as VERL counts)
    response_tokens: int
    tokens: int  # prompt + response tokens of every trained sample, no padding
    devices: int
    tpspd: float  # tokens / (wall_s * devices)
    rollout_tokens_per_s: float  # response tokens / rollout stage time
    train_tokens_per_s: float  # tokens / (time in training stages)
    reward_mean: float
    response_len_mean: float
    response_len_max: int
    staleness_max: int
    staleness_mean: float
    loss: float
    grad_norm: float
    kl: float
    stage_s: dict[str, float] = field(default_factory=dict)  # stage -> seconds (summed per worker)
    # stage -> {"busy_s", "wall_s"}: the device's busy seconds during the stage's events that
    # measured them (core/devices/busy.py: CPU seconds on CPU, NVML's GPU utilisation on CUDA) and
    # those events' wall seconds, summed per worker; stages with no measured event are absent (older
    # files: no key)
    stage_busy: dict[str, dict[str, float]] = field(default_factory=dict)
    idle_frac: dict[str, float] = field(default_factory=dict)  # worker -> idle share of wall_s
    rollout_occupancy: float | None = None  # mean in-flight sequences / max_num_seqs
    warmup: bool = False
    eval_accuracy: float | None = None  # pass@1 measured after this iteration, if any
    # bounded_async's decoupled loss, all-reduced over trainer ranks (None for the on-policy
    # schedules):
    behav_imp_weight: float | None = None  # token mean of pi_prox / pi_behav after the cap
    behav_capped: float | None = None  # share of tokens masked out by train.behav_imp_weight_cap
    # stage -> {"flops", "bytes"} the stage had to do (core/results/utilisation.py); MFU and
    # bandwidth use it
    work: dict[str, dict[str, float]] = field(default_factory=dict)
    # core/record/hostcpu.py: process -> CPU seconds in the iteration (driver included); the
    # driver's % of a core
    host_cpu_s: dict[str, float] = field(default_factory=dict)
    host_cpu_pct: float | None = None
    # engine.shared_prompt=auto: {"packed": n, "unpacked": m, "choices": [one per micro-batch:
    # prompt, responses, packed, predicted_speedup, token_ratio, attention_share, reason]}
    # (core/costmodel/packing.py)
    shared_prompt: dict | None = None


def atomic_write_json(path: Path, obj: Any, compact: bool = False) -> None:
    """Write obj as JSON to path at once (a reader sees the old file or the new one, never half of
    one). compact: no indentation; json's C encoder then writes it, about 3.5x less CPU than
    indented (a results.json that a cell's driver rewrites every iteration: 1.6 ms against 5.9 ms at
    120 KB)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(obj, indent=None if compact else 1, default=_json_default))
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
    os.replace(tmp, path)


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class JsonlAppender:
    """Appends one JSON object per line and flushes it at once (crash-safe progress)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", buffering=1)

    def write(self, obj: Any) -> None:
        if hasattr(obj, "__dataclass_fields__"):
            obj = asdict(obj)
        self._f.write(json.dumps(obj, default=_json_default) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_jsonl(path: Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut short by a crash ends the readable part
    return out


def is_cell(path: Path) -> bool:
    return (Path(path) / RESULTS).is_file()


def is_ablation(path: Path) -> bool:
    return (Path(path) / ABLATION).is_file()


def load_cell(path: Path) -> dict:
    """results.json of a cell, with raw events/samples attached under '_events'/'_samples'."""
    path = Path(path)
    f = path / RESULTS
    if not f.is_file():
        raise UserError(f"{path}: no {RESULTS} here (not an rlbench run folder)")
    try:
        res = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{f}: not valid JSON ({e})") from None
    if res.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"{f}: schema_version {res.get('schema_version')!r}, this rlbench reads "
                        f"{SCHEMA_VERSION}")
    res["_dir"] = str(path)
    return res


def load_events(path: Path) -> list[dict]:
    return read_jsonl(Path(path) / EVENTS)


def load_samples(path: Path) -> list[dict]:
    return read_jsonl(Path(path) / SAMPLES)


def read_ablation(path: Path) -> dict:
    """ablation.json of an ablation folder: {name, reference, cells: [{name, dir, switches,
    exit_code}]}."""
    f = Path(path) / ABLATION
    try:
        abl = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{f}: not valid JSON ({e})") from None
    if not isinstance(abl, dict) or not abl.get("cells"):
        raise UserError(f"{f}: lists no cells")
    return abl


def measured(iterations: list[dict]) -> list[dict]:
    """The iterations aggregates are taken over: the post-warm-up ones. A cell stopped before its
    first measured iteration has none (the config forbids warm-up >= iterations): it reports no
    TPSPD rather than a warm-up iteration's."""
    return [it for it in iterations if not it.get("warmup")]


def ratio(num, den) -> float | None:
    """num / den as a float; None where either is missing (None or NaN) or den is 0."""
    if num is None or den is None or num != num or den != den or den == 0:
        return None
    return float(num) / float(den)


def load_run(path: Path) -> list[dict]:
    """A cell folder or an ablation folder -> list of cell results (reference cell first)."""
    path = Path(path)
    if is_ablation(path):
        abl = read_ablation(path)
        return [load_cell(path / c["dir"]) for c in abl["cells"]
                if (path / c["dir"] / RESULTS).is_file()]
    if is_cell(path):
        return [load_cell(path)]
    raise UserError(f"{path}: neither a run folder ({RESULTS}) nor an ablation folder ({ABLATION})")


def read_contention_probe(run_dir) -> dict | None:
    """The run folder's contention_probe.json, or None where the run made none."""
    path = Path(run_dir) / CONTENTION_PROBE
    return json.loads(path.read_text()) if path.is_file() else None
