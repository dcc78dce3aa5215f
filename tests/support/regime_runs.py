"""A hand-written regime map (imported by tests/unit/experiments/test_regime.py): per point a sync, a barrier and a
periodic-async cell (tests/support/report_runs.make_cell), the point's knobs in each cell's config.

A point is (tail, async_scale): tail=True gives every iteration one 120-token response (sync's rollout
share grows, async overlaps it and wins at scale 1); async_scale stretches the barrier and async cells'
stage times, so the measured speedup is the fixture's own divided by it while the prediction, which
reads only the sync cell, stays put.
"""
from __future__ import annotations

import json
from pathlib import Path

from support.report_runs import make_cell
from rlbench.core.results import schema

LADDER = (("sync", "sync", True, 1.0), ("periodic_async_barrier", "periodic_async", False, 1.3),
          ("periodic_async", "periodic_async", True, 1.0))


def make_point(root: Path, workload: str, tail: bool, async_scale: float, prompts: int) -> list[dict]:
    """Write the point's three cells; -> their ablation.json entries."""
    entries = []
    for suffix, schedule, overlap, factor in LADDER:
        name = f"{workload}/{suffix}"
        folder = root / name.replace("/", "--")
        scale = 1.0 if schedule == "sync" else async_scale * factor
        make_cell(folder, name, schedule, iterations=6, scale=scale, tail=tail)  # 5 measured: an interval
        res = json.loads((folder / schema.RESULTS).read_text())
        res["switches"].update(workload=workload, overlap=overlap)
        cfg = res["config"]
        cfg["run"]["workload"], cfg["engine"]["overlap"] = workload, overlap
        cfg["rollout"].update(response_length="lognormal", response_length_mean=24.0,
                              response_length_sigma=2.0 if tail else 0.5, max_new_tokens=128)
        cfg["train"]["prompts_per_iteration"] = prompts
        schema.atomic_write_json(folder / schema.RESULTS, res)
        entries.append({"name": name, "dir": folder.name, "switches": res["switches"], "exit_code": 0})
    return entries


def make_regime(root: Path, points: dict[str, tuple[bool, float, int]]) -> Path:
    """points: workload -> (tail, async_scale, prompts); an ablation folder named regime."""
    root = Path(root)
    entries = [e for w, (tail, f, p) in points.items() for e in make_point(root, w, tail, f, p)]
    schema.atomic_write_json(root / schema.ABLATION, {
        "schema_version": schema.SCHEMA_VERSION, "kind": "ablation", "name": "regime",
        "reference": entries[0]["name"], "cells": entries})
    return root


# Two tails x two batch sizes: tailed points win (scale < 1.1), untailed ones lose.
MAP = {"flat-p8": (False, 1.0, 8), "tail-p8": (True, 0.9, 8), "flat-p16": (False, 1.2, 16),
       "tail-p16": (True, 0.8, 16)}
