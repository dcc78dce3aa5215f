"""Metrics derived from stage events and samples: one definition for every engine (docs/metrics.md).

TPSPD = (prompt + response tokens of every sample trained in the iteration, no padding)
        / (iteration wall time * number of devices of the run)
which is VERL's perf/throughput and MindSpeed-RL's e2e_tps. One window for every schedule
(docs/metrics.md): an iteration's wall time runs from its first work event (its weight sync), and
not before the previous iteration ended nor before the rollout workers were released for it, to its
last work event (its optimizer step). Nothing between iterations (evaluation, the driver's
bookkeeping, another interleaved cell's turn) is inside it, and a schedule whose rollout runs ahead
holds its rollout workers meanwhile (engines/rollout/gate.py), so no work done outside a window is
credited.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from rlbench.core.record.stages import (IDLE_STAGES, OUTSIDE_STAGES, TRAIN_STAGES, Role, Stage,
                                        role_of)
from rlbench.core.results import schema
from rlbench.core.results.schema import IterationRecord
from rlbench.core.results.utilisation import utilisation

# Workers that hold no device of the run: their waiting is not a device's bubble.
NOT_DEVICES = {Role.DRIVER.value, Role.EVAL.value}


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping [start, end] intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def iteration_window(events: list[dict], prev_end: float | None = None) -> tuple[float, float]:
    """[start, end] of an iteration from its events: its work events' span, starting no earlier than
    the previous iteration's end (prev_end) and no earlier than the end of the pause that held the
    rollout workers before it (a `paused` event, schedules that run ahead). Under bounded staleness
    the next batch generates while this one trains, so its work starts inside the previous window;
    the part before this window is counted there, once, and the held gap between the two in
    neither."""
    work = [e for e in events if e["stage"] not in OUTSIDE_STAGES]
    start, end = min(e["start"] for e in work), max(e["end"] for e in work)
    floors = [e["end"] for e in events if e["stage"] == Stage.PAUSED.value]
    if prev_end is not None:
        floors.append(prev_end)
    return max([start, *floors]), end


def idle_fractions(events: list[dict], start: float, end: float) -> dict[str, float]:
    """device worker -> share of [start, end] in which it ran no work stage (queue waits count as
    idle)."""
    wall = max(end - start, 1e-12)
    busy: dict[str, list] = defaultdict(list)
    for e in events:
        if role_of(e["worker"]) in NOT_DEVICES:
            continue
        busy.setdefault(e["worker"], [])
        s, t = max(e["start"], start), min(e["end"], end)  # clipped to the window
        if t > s and e["stage"] not in IDLE_STAGES and e["stage"] not in OUTSIDE_STAGES:
            busy[e["worker"]].append((s, t))
    return {w: max(0.0, 1.0 - union_length(iv) / wall) for w, iv in busy.items()}


def record(*, iteration: int, start: float, wall_s: float, prompt_tokens: int, response_tokens: int,
           devices: int, rollout_s: float, train_s: float, **rest) -> IterationRecord:
    """An IterationRecord with its derived figures computed here, for every engine (built-in and
    external): tokens, TPSPD = tokens / (wall_s * devices), rollout and train tokens per second of
    their stage time."""
    tokens = prompt_tokens + response_tokens
    return IterationRecord(
        iteration=iteration, start=start, end=start + wall_s, wall_s=wall_s,
        prompt_tokens=prompt_tokens,
        response_tokens=response_tokens, tokens=tokens, devices=devices,
        tpspd=tokens / (wall_s * devices) if wall_s > 0 and devices > 0 else 0.0,
        rollout_tokens_per_s=response_tokens / rollout_s if rollout_s > 0 else 0.0,
        train_tokens_per_s=tokens / train_s if train_s > 0 else 0.0, **rest)


def build_iteration(iteration: int, events: list[dict], samples: list[dict], devices: int,
                    train_stats: dict, warmup: bool, occupancy: float | None = None,
                    prev_end: float | None = None, work: dict | None = None) -> IterationRecord:
    """One IterationRecord from the iteration's events and trained samples.

    prev_end: end of the previous iteration's window. The window (iteration_window) is the same rule
    for every schedule; for sync and periodic-async it is the span of the iteration's events, which
    never overlap the previous one's.
    """
    start, end = iteration_window(events, prev_end)
    # measurement and held gaps: not work
    events = [e for e in events if e["stage"] not in OUTSIDE_STAGES]
    stage_s: dict[str, float] = defaultdict(float)
    for e in events:
        stage_s[e["stage"]] += e["end"] - e["start"]
    rollout_span = union_length([(e["start"],
                                  e["end"]) for e in events if e["stage"] == Stage.ROLLOUT.value])
    train_span = union_length([(e["start"],
                                e["end"]) for e in events if e["stage"] in TRAIN_STAGES])
    stale = [s["trained_version"] - s["behaviour_version"] for s in samples]
    lens = [s["response_len"] for s in samples]
    return record(
        iteration=iteration, start=start, wall_s=end - start, num_samples=len(samples),
        prompt_tokens=sum(s["prompt_len"] for s in samples), response_tokens=sum(lens),
        devices=devices,
        rollout_s=rollout_span, train_s=train_span,
        reward_mean=statistics.fmean(s["reward"] for s in samples) if samples else 0.0,
        response_len_mean=statistics.fmean(lens) if lens else 0.0,
        response_len_max=max(lens, default=0),
        staleness_max=max(stale, default=0),
        staleness_mean=statistics.fmean(stale) if stale else 0.0,
        loss=train_stats.get("loss", 0.0), grad_norm=train_stats.get("grad_norm", 0.0),
        kl=train_stats.get("kl", 0.0), stage_s=dict(stage_s), stage_busy=stage_busy(events),
        idle_frac=idle_fractions(events, start, end), rollout_occupancy=occupancy, warmup=warmup,
        behav_imp_weight=train_stats.get("behav_imp_weight_mean"),
        behav_capped=train_stats.get("behav_capped_mean"), work=work or {},
        shared_prompt=layout_choices(train_stats.get("shared_prompt_choices")))


def stage_busy(events: list[dict]) -> dict[str, dict[str, float]]:
    """stage -> {"busy_s", "wall_s"} over the events that measured their device's busy time
    (`busy`)."""
    out: dict[str, dict[str, float]] = {}
    for e in events:
        if e.get("busy") is None:
            continue
        row = out.setdefault(e["stage"], {"busy_s": 0.0, "wall_s": 0.0})
        row["busy_s"] += e["busy"]
        row["wall_s"] += e["end"] - e["start"]
    return out


def busy_frac(iterations: list[dict]) -> dict[str, float]:
    """stage -> busy seconds / wall seconds over the iterations' measured events (empty where none
    were)."""
    busy: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    for it in iterations:
        for stage, row in (it.get("stage_busy") or {}).items():
            busy[stage] += row["busy_s"]
            wall[stage] += row["wall_s"]
    return {s: busy[s] / wall[s] for s in busy if wall[s] > 0}


def layout_choices(choices: list[dict] | None) -> dict | None:
    """engine.shared_prompt=auto's choices of one iteration -> {packed, unpacked, choices}; None
    without."""
    if choices is None:
        return None
    packed = sum(1 for c in choices if c["packed"])
    return {"packed": packed, "unpacked": len(choices) - packed, "choices": choices}


def _spread(values: list[float]) -> dict:
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def aggregate(iterations: list[dict], evals: list[dict], peak: dict | None = None) -> dict:
    """Aggregates over measured (post-warm-up) iterations; raw values stay in `iterations`. peak:
    one device's measured peak (core/devices/peak.py), for the per-stage utilisation."""
    measured = schema.measured(iterations)
    stage_names = sorted({k for it in measured for k in it["stage_s"]})
    workers = sorted({k for it in measured for k in it["idle_frac"]})
    acc = [e["accuracy"] for e in evals]
    return {
        "tpspd": _spread([it["tpspd"] for it in measured]),
        "wall_s": _spread([it["wall_s"] for it in measured]),
        "rollout_tokens_per_s": _spread([it["rollout_tokens_per_s"] for it in measured]),
        "train_tokens_per_s": _spread([it["train_tokens_per_s"] for it in measured]),
        "stage_s": {s: statistics.fmean(it["stage_s"].get(s, 0.0) for it in measured) for s
                       in stage_names},
        "idle_frac": {w: statistics.fmean(it["idle_frac"].get(w, 0.0) for it in measured) for w
                         in workers},
        "busy_frac": busy_frac(measured),
        "rollout_occupancy": _mean_or_none([it.get("rollout_occupancy") for it in measured]),
        "staleness_max": max((it["staleness_max"] for it in iterations), default=0),
        "staleness_mean": statistics.fmean(it["staleness_mean"] for it in iterations) if iterations
                          else 0.0,
        "reward_first": iterations[0]["reward_mean"] if iterations else None,
        "reward_last": statistics.fmean(it["reward_mean"] for it in iterations[-3:]) if iterations
                       else None,
        "accuracy_before": acc[0] if acc else None,
        "accuracy_after": acc[-1] if acc else None,
        "measured_iterations": len(measured),
        "total_tokens": sum(it["tokens"] for it in iterations),
        "total_train_wall_s": sum(it["wall_s"] for it in iterations),
        "utilisation": utilisation(measured, peak),
    }


def cell_result(*, cell: str, switches: dict, config: dict, provenance: dict, status: str,
                error: str | None,
                model: dict, iterations: list[dict], evals: list[dict], placement: list[dict],
                devices: int | None, wall_s_total: float, rollout_stats: list[dict] | None = None,
                final_params_sha256: str | None = None, clock_t0: float | None = None,
                lifecycle: dict | None = None, **extra) -> dict:
    """results.json of a cell, the same keys for the built-in engines and the external adapters; the
    aggregates are computed here from the iterations and evaluations. lifecycle: start-up,
    evaluation seconds and each process's peak memory and CPU (core/record/lifecycle.py); None where
    rlbench did not start the processes (an external framework's log)."""
    return {"schema_version": schema.SCHEMA_VERSION, "kind": "cell", "cell": cell,
            "switches": switches,
            "config": config, "provenance": provenance, "status": status, "error": error,
            "model": model,
            "iterations": iterations, "evals": evals, "rollout_stats": rollout_stats or [],
            "placement": placement, "devices": devices,
            "aggregates": aggregate(iterations, evals,
                                    provenance.get("peak")) if iterations else {},
            "wall_s_total": wall_s_total, "final_params_sha256": final_params_sha256,
            # system-wide monotonic clock at the cell's time 0 (None: not ours)
            "clock_t0": clock_t0,
            "lifecycle": lifecycle, **extra}


def _mean_or_none(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None
