"""The baseline file of `rlbench check`: its format, validation, and writing one from a run.

Format and how the tolerances were chosen: bench/baselines/README.md.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import numpy as np

from rlbench.check import stats as check_stats
from rlbench.check.metrics import compute_metrics
from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.core.results.metric_table import CHECK_KINDS, DIRECTIONS, family

BASELINE_VERSION = 2  # 2: paired log-ratio samples, stage costs, invariants, calibrated noise
# kind -> (relative tolerance, absolute floor); why these values: bench/baselines/README.md. For
# ratio and cost the tolerance is only a floor under the measured noise (bench/check/stats.py); an
# invariant allows nothing; accuracy, which differs between machines, is judged loosely.
DEFAULT_TOLERANCES = {"ratio": (0.05, 0.0), "cost": (0.05, 0.0), "accuracy": (0.25, 0.10),
                      "share": (0.50, 0.02), "invariant": (0.0, 0.0)}
# metric family -> (tolerance, floor) where a metric differs from its kind. Sync (data-parallel
# all-reduce) and periodic-async (groups summed in arrival order) add the same gradients in another
# order: rewards stay identical for ~75 iterations of the CI config, then one sample flips and the
# final accuracy can differ by a problem or two of 64 (measured: bench/baselines/README.md). An
# invariant is absolute: the tolerance is the allowed |value|.
METRIC_TOLERANCES = {"same_accuracy": (2 / 64, 0.0)}
BOOTSTRAP = {"method": "percentile bootstrap of the change (run - baseline) of the metric's "
                       "statistic",
             "resamples": 2000, "confidence": 0.95, "seed": 0}


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and bool(np.isfinite(x))


def _validate_metric(m, key: str, bad) -> None:
    if not isinstance(m, dict):
        raise bad(key, "must be an object")
    if not _is_number(m.get("value")):
        raise bad(f"{key}.value", f"must be a number, got {m.get('value')!r}")
    for k, what in (("tolerance", "a relative fraction"), ("abs_tolerance", "an absolute floor"),
                    ("se", "a standard error in log units"),
                    ("run_sd", "a run-level spread in log units")):
        if (k in m or k == "tolerance") and not (_is_number(m.get(k)) and m[k] >= 0):
            raise bad(f"{key}.{k}", f"must be a number >= 0 ({what}), got {m.get(k)!r}")
    for k, allowed in (("direction", DIRECTIONS), ("kind", CHECK_KINDS)):
        if m.get(k) not in allowed:
            raise bad(f"{key}.{k}", f"must be one of {', '.join(allowed)}, got {m.get(k)!r}")
    s = m.get("samples")
    if s is not None and not (isinstance(s, dict) and set(s) in ({"values"}, {"log_ratios"})
                              and all(isinstance(v, list) and all(map(_is_number,
                                                                      v)) for v in s.values())):
        raise bad(f"{key}.samples", "must be {values: [numbers]} or {log_ratios: [numbers]}")


def load_baseline(path: Path) -> dict:
    """Read and validate a baseline file; anything malformed is a UserError naming file and key."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: baseline file not found (write one: rlbench check RUN_DIR "
                        f"--update --baseline {path})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None

    def bad(key: str, msg: str) -> UserError:
        return UserError(f"{path}: key '{key}': {msg}")

    if not isinstance(data, dict):
        raise bad("(top level)", "must be a JSON object")
    if data.get("schema_version") != BASELINE_VERSION:
        raise bad("schema_version",
                  f"must be {BASELINE_VERSION}, got {data.get('schema_version')!r} (an older "
                  "baseline: re-measure it, `rlbench check RUN... --calibrate --baseline FILE`)")
    for key in ("config", "config.reference", "config.cells", "metrics"):
        node = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise bad(key, "missing" if node is None else "must be an object")
    for name, m in data["metrics"].items():
        _validate_metric(m, f"metrics.{name}", bad)
    return data


def _previous_tolerances(path: Path) -> tuple[dict, str | None]:
    """Tolerances and notes of an existing baseline file (hand-tuned: kept), or nothing."""
    if not path.is_file():
        return {}, None
    try:
        old = load_baseline(path)
    except UserError:
        return {}, None  # a broken or older file is simply replaced
    return {n: (m["tolerance"], m.get("abs_tolerance", 0.0))
            for n, m in old["metrics"].items()}, old.get("notes")


def _pooled(runs: list[dict]) -> dict:
    """Metrics of several runs of the same config: values and se from the calibration for paired
    ratios, the median value otherwise; samples pooled. Returns (metrics, inflation)."""
    first = runs[0]["metrics"]
    names = [n for n in first if all(n in r["metrics"] for r in runs)]
    paired = {n for n in names if "log_ratios" in (first[n].get("samples") or {})}
    calib, c = check_stats.calibrate([{n: r["metrics"][n]["samples"]["log_ratios"] for n in paired}
                                      for r in runs])
    out = {}
    for n in names:
        ms = [r["metrics"][n] for r in runs]
        m = dict(first[n])
        m.pop("iterations", None)  # of one run's samples; a baseline pools several
        if ms[0].get("samples"):
            key = next(iter(ms[0]["samples"]))
            m["samples"] = {key: [x for mm in ms for x in mm["samples"][key]]}
        if n in paired and len(runs) > 1:
            m["value"], m["se"], m["run_sd"] = calib[n]
        else:
            m["value"] = float(np.median([mm["value"] for mm in ms]))
        out[n] = m
    return out, c


def write_baseline(run_dirs, baseline_path: Path, tolerances: dict | None = None) -> Path:
    """Write a baseline from one complete run, or calibrate it from several unchanged runs of the
    same config (value: mean over runs; se and the noise inflation measured from their spread).
    Tolerances already in an existing baseline file are kept (hand-tuned); `tolerances` ({kind or
    metric name: relative fraction}) overrides them."""
    run_dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    runs = [compute_metrics(d) for d in run_dirs]
    for d, cur in zip(run_dirs, runs):
        broken = [f"{n} ({c['status']})" for n, c in cur["cells"].items()
                  if c["status"] != "complete"]
        planted = [n for n, c in cur["cells"].items() if c.get("planted_slowdown")]
        if broken or planted:
            raise UserError(f"{d}: a baseline needs every cell complete and nothing planted "
                            f"(RLBENCH_SLOW), not: "
                            f"{', '.join(broken + [f'{n} (planted slowdown)' for n in planted])}")
    path = Path(baseline_path)
    previous, notes = _previous_tolerances(path)
    pooled, c = _pooled(runs)
    metrics, given = {}, tolerances or {}
    for name, m in pooled.items():  # explicit by name > by kind > previous file > default
        rel, floor = (previous.get(name) or METRIC_TOLERANCES.get(family(name))
                      or DEFAULT_TOLERANCES[m["kind"]])
        rel = float(given.get(name, given.get(m["kind"], rel)))
        metrics[name] = {**m, "tolerance": rel, "abs_tolerance": floor}
    cur = runs[0]
    ref = cur["reference"]
    obj = {"schema_version": BASELINE_VERSION,
           "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "config": {"reference_cell": ref, "reference": cur["cells"][ref]["config"],
                      "cells": {n: c["switches"] for n, c in cur["cells"].items()},
                      # every cell's full resolved config: check compares these, not a projection
                      "cell_configs": {n: c["config"] for n, c in cur["cells"].items()}},
           "provenance": {**cur["cells"][ref]["provenance"],
                          "run_dirs": [str(d) for d in run_dirs]},
           "statistics": {**check_stats.DEFAULTS, "inflation": c if len(runs) == 1 else 1.0,
                          "measured_inflation": c, "runs": len(runs), "bootstrap": BOOTSTRAP},
           "metrics": metrics,
           "notes": notes
                    or "Written by `rlbench check --update` / `--calibrate`; "
                       "bench/baselines/README.md."}
    schema.atomic_write_json(path, obj)
    return path


def parse_tolerances(pairs: list[str]) -> dict:
    """['ratio=0.1', 'accuracy:sync=0.2'] -> {'ratio': 0.1, 'accuracy:sync': 0.2} (for
    --tolerance)."""
    out = {}
    for pair in pairs:
        key, _, raw = pair.rpartition("=")
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not key.strip() or not (np.isfinite(value) and value >= 0):
            raise UserError(f"--tolerance {pair!r}: expected KIND_OR_METRIC=FRACTION >= 0, e.g. "
                            f"ratio=0.1")
        out[key.strip()] = value
    return out
