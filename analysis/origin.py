"""Where a run's numbers came from, read from its files: the command that made it, its config file,
the machine, the date and the code. `rlbench report RUN --markdown` states these above the tables,
so that a table copied into the documentation carries what reproduces it.

ablation.json records the command, config file, machine and start time of runs made since it does
(bench/run/ablation.py new_record); for an older run or a single cell folder, what is missing is
said to be missing, and the machine is read now from this machine, marked as such, never presented
as the run's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlbench.analysis.data import RunData
from rlbench.core.results import provenance, schema


# provenance's other text fields
NOT_VERSIONS = ("git_commit", "code_digest", "platform", "created")


@dataclass
class Origin:
    run_dir: Path
    command: str | None  # as typed, e.g. "rlbench run --ablation async"; None: not recorded
    config_file: str | None
    machine: dict  # provenance.machine()'s fields
    machine_recorded: bool  # False: read from this machine at report time, not by the run
    device: dict | None  # the first cell's provenance.device (type, name, count, torch threads)
    created: str | None  # run start (ablation.json) or the earliest cell's provenance, ISO 8601 UTC
    git_commit: str | None
    code_digest: str | None
    versions: dict  # the first cell's package versions (rlbench, torch, ...) and Python's


def origin(run: RunData) -> Origin:
    """The origin of one run folder (not merged: a merged run has one origin per folder)."""
    record = schema.read_ablation(run.path) if run.kind == "ablation" else {}
    prov = [c.result.get("provenance") or {} for c in run.cells]
    first = prov[0] if prov else {}
    created = record.get("created") or min((p["created"] for p in prov if p.get("created")),
                                           default=None)
    machine = record.get("machine")
    return Origin(run_dir=run.path, command=record.get("command"),
                  config_file=record.get("config_file"),
                  machine=machine or provenance.machine(), machine_recorded=bool(machine),
                  device=first.get("device"), created=created, git_commit=first.get("git_commit"),
                  code_digest=record.get("code_digest") or first.get("code_digest"),
                  versions={k: v for k, v in first.items() if isinstance(v, str) and v and k
                            not in NOT_VERSIONS})


def overrides_of(run: RunData) -> list[str]:
    """The --set keys of an ablation run as `key=value` (ablation.json `overrides`); [] for none."""
    record = schema.read_ablation(run.path) if run.kind == "ablation" else {}
    out: list[str] = []

    def walk(tree: dict, prefix: str) -> None:
        for key, value in tree.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out.append(f"{prefix}{key}={value}")
    walk(record.get("overrides") or {}, "")
    return out


def device_text(device: dict | None) -> str | None:
    """'cpu' or 'cuda: NVIDIA H100 80GB HBM3 × 8', from a provenance.device record."""
    if not device:
        return None
    name = device.get("name")
    return (f"{device.get('type')}: {name} × {device.get('count', 1)}" if name
            else str(device.get("type")))

