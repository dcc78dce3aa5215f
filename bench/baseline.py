"""The baseline file of `rlbench check`: its format, validation, and writing one from a run.

Format and how the tolerances were chosen: bench/baselines/README.md.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import numpy as np

from rlbench import schema
from rlbench.check_metrics import compute_metrics
from rlbench.errors import UserError

BASELINE_VERSION = 1
KINDS = ("ratio", "accuracy", "share")
DIRECTIONS = ("higher_is_better", "lower_is_better")
# kind -> (relative tolerance, absolute floor); why these values: bench/baselines/README.md.
DEFAULT_TOLERANCES = {"ratio": (0.10, 0.0), "accuracy": (0.15, 0.05), "share": (0.50, 0.02)}
BOOTSTRAP = {"method": "percentile bootstrap of the change (run - baseline) of the metric's statistic",
             "resamples": 2000, "confidence": 0.95, "seed": 0}


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and bool(np.isfinite(x))


def _validate_metric(m, key: str, bad) -> None:
    if not isinstance(m, dict):
        raise bad(key, "must be an object")
    if not _is_number(m.get("value")):
        raise bad(f"{key}.value", f"must be a number, got {m.get('value')!r}")
    for k, what in (("tolerance", "a relative fraction"), ("abs_tolerance", "an absolute floor")):
        if (k in m or k == "tolerance") and not (_is_number(m.get(k)) and m[k] >= 0):
            raise bad(f"{key}.{k}", f"must be a number >= 0 ({what}), got {m.get(k)!r}")
    for k, allowed in (("direction", DIRECTIONS), ("kind", KINDS)):
        if m.get(k) not in allowed:
            raise bad(f"{key}.{k}", f"must be one of {', '.join(allowed)}, got {m.get(k)!r}")
    s = m.get("samples")
    if s is not None and not (isinstance(s, dict) and set(s) in ({"values"}, {"numerator", "denominator"})
                              and all(isinstance(v, list) and all(map(_is_number, v)) for v in s.values())):
        raise bad(f"{key}.samples", "must be {values: [numbers]} or {numerator: [...], denominator: [...]}")


def load_baseline(path: Path) -> dict:
    """Read and validate a baseline file; anything malformed is a UserError naming file and key."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: baseline file not found (write one: rlbench check RUN_DIR --update "
                        f"--baseline {path})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None

    def bad(key: str, msg: str) -> UserError:
        return UserError(f"{path}: key '{key}': {msg}")

    if not isinstance(data, dict):
        raise bad("(top level)", "must be a JSON object")
    if data.get("schema_version") != BASELINE_VERSION:
        raise bad("schema_version", f"must be {BASELINE_VERSION}, got {data.get('schema_version')!r}")
    for key in ("config", "config.reference", "config.cells", "metrics"):
        node = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise bad(key, "missing" if node is None else "must be an object")
    for name, m in data["metrics"].items():
        _validate_metric(m, f"metrics.{name}", bad)
    return data


def write_baseline(run_dir: Path, baseline_path: Path, tolerances: dict | None = None) -> Path:
    """Write a baseline from a complete run. Tolerances already in an existing baseline file are kept
    (they are hand-tuned); `tolerances` ({kind or metric name: relative fraction}) overrides them."""
    cur = compute_metrics(run_dir)
    broken = [f"{n} ({c['status']})" for n, c in cur["cells"].items() if c["status"] != "complete"]
    if broken:
        raise UserError(f"{run_dir}: a baseline needs every cell complete, not: {', '.join(broken)}")
    path, previous, notes = Path(baseline_path), {}, None
    if path.is_file():
        try:
            old = load_baseline(path)
            previous = {n: (m["tolerance"], m.get("abs_tolerance", 0.0)) for n, m in old["metrics"].items()}
            notes = old.get("notes")
        except UserError:
            pass  # a broken old file is simply replaced
    metrics, given = {}, tolerances or {}
    for name, m in cur["metrics"].items():  # explicit by name > by kind > previous file > default
        rel, floor = previous.get(name) or DEFAULT_TOLERANCES[m["kind"]]
        rel = float(given.get(name, given.get(m["kind"], rel)))
        metrics[name] = {**m, "tolerance": rel, "abs_tolerance": floor}
    ref = cur["reference"]
    obj = {"schema_version": BASELINE_VERSION,
           "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "config": {"reference_cell": ref, "reference": cur["cells"][ref]["config"],
                      "cells": {n: c["switches"] for n, c in cur["cells"].items()},
                      # every cell's full resolved config: check compares these, not a projection
                      "cell_configs": {n: c["config"] for n, c in cur["cells"].items()}},
           "provenance": {**cur["cells"][ref]["provenance"], "run_dir": str(run_dir)},
           "statistics": BOOTSTRAP, "metrics": metrics,
           "notes": notes or "Written by `rlbench check --update`; tolerances: bench/baselines/README.md."}
    schema.atomic_write_json(path, obj)
    return path


def parse_tolerances(pairs: list[str]) -> dict:
    """['ratio=0.1', 'accuracy:sync=0.2'] -> {'ratio': 0.1, 'accuracy:sync': 0.2} (for --tolerance)."""
    out = {}
    for pair in pairs:
        key, _, raw = pair.rpartition("=")
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not key.strip() or not (np.isfinite(value) and value >= 0):
            raise UserError(f"--tolerance {pair!r}: expected KIND_OR_METRIC=FRACTION >= 0, e.g. ratio=0.1")
        out[key.strip()] = value
    return out
