"""Builders of result folders with accuracy curves (imported by tests/unit/analysis/test_accuracy_report.py).

Every iteration of a cell lasts exactly `wall` seconds (its stage events), iterations are GAP seconds
apart, and an evaluation of EVAL_S seconds follows every EVERY-th iteration (and precedes the first), so
the training clock at the evaluation after k iterations is k * wall + (k - 1) * GAP, evaluation excluded.
Iteration records and aggregates come from rlbench.core.results.metrics, as the runner makes them.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rlbench.core.config import RunConfig
from rlbench.core.results import metrics, schema

G, PROMPTS, PROMPT_LEN, RESPONSE_LEN = 4, 8, 20, 12
GAP, EVAL_S, EVERY, N_EVAL = 0.05, 0.5, 2, 64


def clock(k: int, wall: float) -> float:
    """The training wall time a test expects at the evaluation after k iterations: the k windows, without
    the evaluations and the driver's gaps between iterations (written by hand, not by the code under test)."""
    return k * wall


def _events(k: int, t: float, wall: float) -> list[dict]:
    parts = [("weight_sync", 0.05), ("rollout", 0.6), ("update", 0.3), ("optimizer_step", 0.05)]
    out, scale = [], wall / sum(d for _, d in parts)
    for stage, d in parts:
        out.append({"worker": "colocated", "stage": stage, "iteration": k, "start": t, "end": t + d * scale,
                    "devices": 2})
        t += d * scale
    return out


def _samples(k: int, mixed: int, seed: int) -> list[dict]:
    """PROMPTS groups of G; the first `mixed` groups have rewards that differ, the rest all 0."""
    return [{"iteration": k, "prompt": p, "sample": j, "prompt_len": PROMPT_LEN, "response_len": RESPONSE_LEN,
             "reward": float(p < mixed and j == (k + seed) % G), "behaviour_version": k, "trained_version": k,
             "finished": True} for p in range(PROMPTS) for j in range(G)]


def make_curve_cell(folder: Path, name: str, accuracy: list[float], wall: float, seed: int = 0,
                    schedule: str = "sync", mixed: tuple[int, int] = (6, 2)) -> Path:
    """A complete cell of (len(accuracy) - 1) * EVERY iterations; accuracy[i] is the evaluation after
    i * EVERY iterations, accuracy in any format 0.1 above it. mixed: groups with mixed rewards in the
    first and the second half of the iterations."""
    folder = Path(folder)
    n_iter = (len(accuracy) - 1) * EVERY
    t, events, samples, its = 1.0, [], [], []
    evals = [{"iteration": 0, "accuracy": accuracy[0], "accuracy_any_format": accuracy[0] + 0.1,
              "format_rate": 1.0, "n": N_EVAL}]
    events.append({"worker": "eval", "stage": "eval", "iteration": 0, "start": t - EVAL_S - 0.1, "end": t - 0.1,
                   "devices": 0})
    for k in range(n_iter):
        ev = _events(k, t, wall)
        rows = _samples(k, mixed[0] if k < n_iter // 2 else mixed[1], seed)
        rec = metrics.build_iteration(k, ev, rows, 2, {"loss": 0.1, "grad_norm": 1.0, "kl": 0.0}, warmup=k < 1)
        t = rec.end + GAP
        events += ev
        if (k + 1) % EVERY == 0:
            acc = accuracy[(k + 1) // EVERY]
            events.append({"worker": "eval", "stage": "eval", "iteration": k + 1, "start": t, "end": t + EVAL_S,
                           "devices": 0})
            t += EVAL_S
            evals.append({"iteration": k + 1, "accuracy": acc, "accuracy_any_format": acc + 0.1,
                          "format_rate": 1.0, "n": N_EVAL})
            rec.eval_accuracy = acc
        samples += rows
        its.append(asdict(rec))
    for fname, rows in ((schema.EVENTS, events), (schema.SAMPLES, samples), (schema.ITERATIONS, its)):
        app = schema.JsonlAppender(folder / fname)
        for r in rows:
            app.write(r)
        app.close()
    cfg = RunConfig().model_dump(mode="json")
    cfg["engine"].update(schedule=schedule)
    cfg["run"].update(iterations=n_iter, warmup_iterations=1, eval_every=EVERY, seed=seed)
    schema.atomic_write_json(folder / schema.RESULTS, {
        "schema_version": schema.SCHEMA_VERSION, "kind": "cell", "cell": name,
        "switches": {"schedule": schedule, "tri_model": False, "shared_prompt": False}, "config": cfg,
        "provenance": {}, "status": "complete", "error": None, "model": {"kind": "tiny"}, "iterations": its,
        "evals": evals, "rollout_stats": [], "aggregates": metrics.aggregate(its, evals), "wall_s_total": t})
    return folder


def make_seeded_ablation(root: Path, cells: dict[str, tuple[str, float, list[list[float]]]],
                         seeds: list[int]) -> Path:
    """cells: name -> (schedule, iteration wall s, one accuracy curve per seed). With several seeds the
    folders and names are `<name>@seed<s>` and ablation.json lists the seeds, as `rlbench run --seeds`."""
    root = Path(root)
    entries = []
    for i, seed in enumerate(seeds):
        for name, (schedule, wall, accs) in cells.items():
            full = schema.seeded_name(name, seed) if len(seeds) > 1 else name
            make_curve_cell(root / full, full, accs[i], wall, seed, schedule)
            entries.append({"name": full, "dir": full, "switches": {"schedule": schedule}, "exit_code": 0,
                            "cell": name, "seed": seed})
    record = {"schema_version": schema.SCHEMA_VERSION, "kind": "ablation", "name": "staleness",
              "reference": entries[0]["name"], "cells": entries}
    if len(seeds) > 1:
        record["seeds"] = seeds
    schema.atomic_write_json(root / schema.ABLATION, record)
    return root
