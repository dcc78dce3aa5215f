"""Builders of realistic result folders for the report tests (imported by tests/unit/reports/test_reports.py).

Events, samples and iteration records are generated for a sync cell (one "colocated" worker on 2
devices) and a periodic-async cell ("trainer" + "rollout0", 1 device each), then turned into
IterationRecords and aggregates by rlbench.core.results.metrics, exactly as the runner does.
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

from rlbench.core.config import RunConfig
from rlbench.core.results import metrics, schema

G, PROMPTS, PROMPT_LEN = 4, 8, 20
STEP_S = 0.01  # seconds per decode step on 2 devices
TRAIN_S = {"reward": 0.02, "advantage": 0.01, "old_logprob": 0.12, "ref_logprob": 0.12, "update": 0.3}


def lengths(k: int, tail: bool = True) -> list[list[int]]:
    """Response lengths [prompt][sample] of iteration k; with tail, one response of 120 tokens."""
    rng = random.Random(k)
    out = [[rng.randint(8, 30) for _ in range(G)] for _ in range(PROMPTS)]
    if tail:
        out[(3 * k) % PROMPTS][0] = 120
    return out


def sample_rows(k: int, lens: list[list[int]], version: int) -> list[dict]:
    return [{"iteration": k, "prompt": p, "sample": j, "prompt_len": PROMPT_LEN, "response_len": n,
             "reward": float((p + j + k) % 3 == 0), "behaviour_version": version,
             "trained_version": version, "finished": n < 120}
            for p, row in enumerate(lens) for j, n in enumerate(row)]


def _add(ev: list, worker: str, stage: str, k: int, start: float, dur: float, devices: int) -> float:
    ev.append({"worker": worker, "stage": stage, "iteration": k, "start": start, "end": start + dur,
               "devices": devices})
    return start + dur


def sync_events(k: int, t: float, lens, scale: float) -> tuple[list[dict], float]:
    """weight_sync -> rollout (as long as the longest response) -> training phases -> step."""
    ev: list[dict] = []
    t = _add(ev, "colocated", "weight_sync", k, t, 0.05 * scale, 2)
    t = _add(ev, "colocated", "rollout", k, t, max(map(max, lens)) * STEP_S * scale, 2)
    for stage, d in TRAIN_S.items():
        t = _add(ev, "colocated", stage, k, t, d * scale, 2)
    return ev, _add(ev, "colocated", "optimizer_step", k, t, 0.05 * scale, 2)


def async_events(k: int, t: float, lens, scale: float) -> tuple[list[dict], float]:
    """Rollout on 1 device (steps 1.1x slower: the tail is latency-bound); the trainer (1 device,
    2x slower) takes groups as they finish, waiting on the queue in between."""
    ev: list[dict] = []
    _add(ev, "rollout0", "weight_sync", k, t, 0.04 * scale, 1)
    t = _add(ev, "trainer", "weight_sync", k, t, 0.05 * scale, 1)
    finish = {p: t + max(row) * STEP_S * 1.1 * scale for p, row in enumerate(lens)}
    _add(ev, "rollout0", "rollout", k, t, max(finish.values()) - t, 1)
    for p in sorted(finish, key=finish.get):
        t = _add(ev, "trainer", "queue_wait", k, t, max(0.0, finish[p] - t), 1)
        for stage, d in TRAIN_S.items():
            t = _add(ev, "trainer", stage, k, t, 2 * d / PROMPTS * scale, 1)
    return ev, _add(ev, "trainer", "optimizer_step", k, t, 0.1 * scale, 1)


def config(schedule: str) -> dict:
    cfg = RunConfig().model_dump(mode="json")
    cfg["engine"].update(schedule=schedule, rollout_devices=1, train_devices=1)
    cfg["run"].update(iterations=4, warmup_iterations=1)
    cfg["rollout"].update(group_size=4, max_num_seqs=32)  # the world these fixtures describe
    return cfg


def make_cell(folder: Path, name: str, schedule: str, iterations: int = 4, status: str = "complete",
              scale: float = 1.0, tail: bool = True) -> Path:
    """Write a cell folder: results.json, events.jsonl, iterations.jsonl, samples.jsonl."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    make_events = sync_events if schedule == "sync" else async_events
    events, samples, its, t = [], [], [], 0.5
    evals = [{"iteration": 0, "accuracy": 0.25, "n": 64}]
    for k in range(iterations):
        lens = lengths(k, tail)
        ev, t = make_events(k, t, lens, scale)
        rows = sample_rows(k, lens, version=k)
        rec = metrics.build_iteration(k, ev, rows, 2, {"loss": 0.1, "grad_norm": 1.0, "kl": 0.0},
                                      warmup=k < 1, occupancy=0.6)
        if k == iterations - 1:
            evals.append({"iteration": k + 1, "accuracy": 0.25 + 0.05 * iterations, "n": 64})
            rec.eval_accuracy = evals[-1]["accuracy"]
        events += ev
        samples += rows
        its.append(asdict(rec))
        t += 0.01
    for fname, rows in ((schema.EVENTS, events), (schema.SAMPLES, samples), (schema.ITERATIONS, its)):
        app = schema.JsonlAppender(folder / fname)
        for r in rows:
            app.write(r)
        app.close()
    schema.atomic_write_json(folder / schema.RESULTS, {
        "schema_version": schema.SCHEMA_VERSION, "kind": "cell", "cell": name,
        "switches": {"schedule": schedule, "tri_model": False, "shared_prompt": False},
        "config": config(schedule), "provenance": provenance(), "status": status,
        "error": None if status == "complete" else "interrupted (Ctrl-C or SIGTERM)",
        "model": {"kind": "tiny"}, "iterations": its, "evals": evals if its else evals[:1],
        "rollout_stats": [], "aggregates": metrics.aggregate(its, evals) if its else {},
        "wall_s_total": t + 1.0})
    return folder


def provenance() -> dict:
    return {"git_commit": "0" * 40, "rlbench": "0.1.0", "torch": "2.5.0", "transformers": "4.50.0",
            "python": "3.11.2", "platform": "Linux", "device": {"type": "cpu", "torch_threads": 2},
            "cpu_threads": 2, "created": "2025-01-01T00:00:00+00:00"}


def make_ablation(root: Path, scale: float = 1.0, names=("sync", "periodic_async"),
                  async_iterations: int = 4, async_status: str = "complete", iterations: int = 4) -> Path:
    """A 2-cell ablation folder (sync reference + periodic-async) with ablation.json (iterations: the sync
    cell's; 6 and 6 give 5 measured pairs, enough for the speedup's interval: core/ratio_interval.py)."""
    root = Path(root)
    make_cell(root / names[0], names[0], "sync", iterations=iterations, scale=scale)
    make_cell(root / names[1], names[1], "periodic_async", iterations=async_iterations,
              status=async_status, scale=scale)
    schema.atomic_write_json(root / schema.ABLATION, {
        "schema_version": schema.SCHEMA_VERSION, "kind": "ablation", "name": "async",
        "reference": names[0],
        "cells": [{"name": n, "dir": n, "switches": {"schedule": s, "tri_model": False,
                                                      "shared_prompt": False}, "exit_code": 0}
                  for n, s in zip(names, ("sync", "periodic_async"))]})
    return root


# families ladder rung -> (schedule, stage-time scale: smaller is faster, engine settings the rung's config records)
LADDER = {"sync": ("sync", 1.0, {}), "barrier": ("periodic_async", 1.4, {"overlap": False}),
          "periodic_async": ("periodic_async", 1.1, {}),
          "one_step_off": ("one_step_off", 0.9, {"max_staleness": 1}),
          "k2": ("bounded_async", 0.8, {"max_staleness": 2}),
          "k2_partial": ("bounded_async", 0.75, {"max_staleness": 2, "partial_rollout": True})}


def make_families(root: Path) -> Path:
    """Six hand-made cells (LADDER) as a families ablation; one-step-off's samples one version stale after
    the first iteration."""
    root = Path(root)
    entries = []
    for name, (schedule, scale, engine) in LADDER.items():
        folder = make_cell(root / name, name, schedule, scale=scale)
        res = json.loads((folder / schema.RESULTS).read_text())
        res["config"]["engine"].update(engine)
        res["switches"].update(engine)
        schema.atomic_write_json(folder / schema.RESULTS, res)
        if name == "one_step_off":
            rows = [json.loads(line) for line in (folder / schema.SAMPLES).read_text().splitlines()]
            (folder / schema.SAMPLES).write_text("".join(
                json.dumps({**r, "behaviour_version": max(0, r["trained_version"] - 1)}) + "\n" for r in rows))
        entries.append({"name": name, "dir": name, "switches": res["switches"], "exit_code": 0})
    schema.atomic_write_json(root / schema.ABLATION, {"schema_version": schema.SCHEMA_VERSION, "kind": "ablation",
                                                      "name": "families", "reference": "sync", "cells": entries})
    return root
