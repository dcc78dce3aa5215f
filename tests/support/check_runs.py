"""Result folders written by hand for the `rlbench check` tests (test_check*.py).

The folders follow rlbench.core.results.schema: an ablation folder with ablation.json and one cell folder per
cell (results.json + events.jsonl), ~8 iterations per cell with noisy per-iteration TPSPD; a cell
can have a stage slowed down (what RLBENCH_SLOW plants in a real run).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pytest

from rlbench.check import verdicts as chk
from rlbench.core.config import RunConfig
from rlbench.core.config_files import with_overrides
from rlbench.core.results import schema
from rlbench.core.results.metrics import aggregate

SYNC = {"schedule": "sync", "tri_model": False, "shared_prompt": False}


ASYNC = {**SYNC, "schedule": "periodic_async"}


SPEEDUP = "speedup:periodic_async/sync"


@dataclass
class Cell:
    name: str
    switches: dict
    tpspd: float  # mean per-iteration TPSPD
    noise: float = 0.03  # relative per-iteration spread
    accuracy: float = 0.40
    overhead: float = 0.02  # share of each iteration outside the main worker's stages
    status: str = "complete"
    overrides: dict = field(default_factory=dict)  # config overrides (besides the switches)
    slow: dict = field(default_factory=dict)  # {stage: fraction} that stage takes longer (iteration too)
    # outside the iterations: {"startup_s" | "startup_cpu_s" | "first_iteration_s" | "eval_s" | "peak_rss_mb" |
    # "process_cpu": factor}
    life: dict = field(default_factory=dict)


def write_cell(folder, cell: Cell, seed: int, iterations: int = 8, warmup: int = 2) -> None:
    """One realistic cell folder: results.json (iterations, evals, aggregates) and events.jsonl."""
    rng = np.random.default_rng(seed)
    life_rng = np.random.default_rng(seed + 10_000)  # its own stream: the iterations' draws stay as they were
    cfg = with_overrides(RunConfig(), {**cell.overrides, "engine": cell.switches}).model_dump(mode="json")
    main = "colocated" if cell.switches["schedule"] == "sync" else "trainer"
    its, events, t = [], [], 0.0
    stages = ["weight_sync", "rollout", "reward", "old_logprob", "update", "optimizer_step"]
    for k in range(iterations):
        tpspd = cell.tpspd * (1 + cell.noise * rng.standard_normal())
        tokens = 4000
        covered = tokens / (tpspd * 2) * (1 - cell.overhead)
        spans, s = [], t
        for stage in stages:  # the gap (harness overhead) is at the end
            d = covered / len(stages) * (1 + cell.slow.get(stage, 0.0))
            spans.append((stage, s, s + d))
            s += d
        wall = (s - t) / (1 - cell.overhead)
        if main == "trainer":  # the async consumer waits on the queue while the rollout runs, then
            # opens each group it takes off (handoff): 1% of the rollout's (and the reward's) work
            roll = spans[1][2] - spans[1][1]
            spans.append(("queue_wait", spans[1][1], spans[1][2]))
            spans.append(("handoff", spans[1][2], spans[1][2] + 0.01 * roll * (1 + cell.slow.get("handoff", 0.0))
                          * (1 + cell.noise * rng.standard_normal())))
        events += [{"worker": "driver" if st in ("queue_wait", "handoff") else main, "stage": st, "iteration": k,
                    "devices": 1, "start": a, "end": b, "cpu": b - a} for st, a, b in spans]
        its.append({"iteration": k, "start": t, "end": t + wall, "wall_s": wall, "tokens": tokens,
                    "response_tokens": tokens // 4, "num_samples": 32,
                    "devices": 2, "tpspd": tokens / (wall * 2), "rollout_tokens_per_s": 1.0,
                    "train_tokens_per_s": 1.0, "reward_mean": 0.3 + 0.02 * k, "staleness_max": 0,
                    "staleness_mean": 0.0, "stage_s": {}, "idle_frac": {}, "warmup": k < warmup})
        t += wall + 0.5
    evals = [{"iteration": k, "accuracy": acc, "n": 64, "wall_s": 1.0,
              "cpu_s": cell.life.get("eval_s", 1.0) * (1 + 0.01 * life_rng.standard_normal())}
             for k, acc in ((0, 0.30), (iterations, cell.accuracy))]
    res = {"schema_version": schema.SCHEMA_VERSION, "kind": "cell", "cell": cell.name,
           "switches": cell.switches, "config": cfg, "status": cell.status, "error": None,
           "provenance": {"git_commit": "abc123", "torch": "2.x"}, "iterations": its, "evals": evals,
           "aggregates": aggregate(its, evals), "lifecycle": _lifecycle(cell, main, life_rng)}
    folder.mkdir(parents=True)
    schema.atomic_write_json(folder / schema.RESULTS, res)
    (folder / schema.EVENTS).write_text("".join(json.dumps(e) + "\n" for e in events))


def _lifecycle(cell: Cell, main: str, rng) -> dict:
    """results.json `lifecycle` (core/record/lifecycle.py): 1% noise, times cell.life's factors."""
    def value(key: str, base: float) -> float:
        return base * cell.life.get(key, 1.0) * (1 + 0.01 * rng.standard_normal())

    return {"startup_s": value("startup_s", 20.0), "startup_cpu_s": value("startup_cpu_s", 10.0), "ring_wait_s": 5.0,
            "first_iteration_s": value("first_iteration_s", 8.0),
            "peak_rss_mb": {"driver": value("peak_rss_mb", 350.0), f"{main}0": value("peak_rss_mb", 360.0)},
            "process_cpu_s": {"driver": value("process_cpu", 0.5), f"{main}0": value("process_cpu", 20.0)}}


def write_run(path, cells: list[Cell], seed: int = 0):
    """An ablation folder; the first cell is the reference."""
    path.mkdir(parents=True)
    entries = [{"name": c.name, "dir": c.name.replace("+", "plus_"), "switches": c.switches, "exit_code": 0}
               for c in cells]
    schema.atomic_write_json(path / schema.ABLATION, {"schema_version": schema.SCHEMA_VERSION,
                                                      "kind": "ablation", "name": "async",
                                                      "reference": cells[0].name, "cells": entries})
    for i, (c, e) in enumerate(zip(cells, entries)):
        write_cell(path / e["dir"], c, seed=seed * 100 + i)
    return path


def async_run(path, speedup: float = 2.0, seed: int = 0, **kw):
    """sync vs periodic_async; kw go to both cells (Cell fields)."""
    return write_run(path, [Cell("sync", SYNC, 100.0, **kw), Cell("periodic_async", ASYNC, 100.0 * speedup, **kw)],
                     seed=seed)


def row(result, metric):
    return next(r for r in result.rows if r.metric == metric)


@pytest.fixture
def baseline(tmp_path):
    run = async_run(tmp_path / "base")
    return chk.write_baseline(run, tmp_path / "baseline.json")
