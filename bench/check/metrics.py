"""What `rlbench check` compares, computed from a run's result files (reads files only).

Every performance metric is a *paired* per-iteration ratio: iteration k of one cell against
iteration k of another (or two stages of the same iteration), so what drifts over a run on a shared
machine cancels, all the more when the cells ran interleaved (run.interleave). The samples are the
per-iteration log-ratios; the metric's value is exp(their 20%-trimmed mean). Metric names are
``family:cells``; the families, their kinds, directions and descriptions are the CHECK rows of
core/results/metric_table.py (speedups, switch gains, stage costs, the queue path's cost, overhead
shares, the sync = periodic-async invariants, accuracy and reward).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
from rlbench.check.stats import trimmed
from rlbench.core.record.stages import OUTSIDE_STAGES
from rlbench.core.results import schema
from rlbench.core.results.metric_table import CHECK_FAMILIES, check_metric, family
from rlbench.core.results.metrics import union_length
from rlbench.core import schedules
from rlbench.core.schedules import by_role
from rlbench.core.schedules.spec import PERIODIC, REFERENCE

# switch -> (value with the switch on, value with it off): the schedule pair is the periodic one
# over the reference
SWITCHES = {"schedule": (by_role(PERIODIC).name, by_role(REFERENCE).name),
            "tri_model": (True, False),
            "shared_prompt": (True, False)}
# Keys that come with the pair's schedules (their own recorded options): not a second difference.
SCHEDULE_KEYS = tuple(schedules.option_keys())
# Keys that come with a switch (recorded only where it is on): not a second difference either.
COMES_WITH = {"schedule": SCHEDULE_KEYS, "shared_prompt": ("shared_prompt_impl",)}
# switch -> its gain's family (core/results/metric_table.py)
GAIN_NAMES = {"schedule": "async_gain", "tri_model": "tri_model_gain",
              "shared_prompt": "shared_prompt_gain"}
# switch -> the stages whose cost that switch changes: what a regression of its component shows in
COMPONENT_STAGES = {"schedule": ("update", "weight_sync"), "tri_model": ("update",),
                    "shared_prompt": ("update",)}
STAGE_WHAT = {"update": "gradient pass (forward + backward)",
              "weight_sync": "weight sync to the rollout engine"}


def read_cells(run_dir: Path) -> tuple[str, dict[str, dict]]:
    """-> (reference cell, {cell: results dict}); a cell listed in ablation.json without results
    gets status "missing"."""
    run_dir = Path(run_dir)
    if schema.is_ablation(run_dir):
        abl = schema.read_ablation(run_dir)
        cells = {}
        for c in abl.get("cells") or []:
            d = run_dir / c["dir"]
            cells[c["name"]] = schema.load_cell(d) if schema.is_cell(d) else \
                {"cell": c["name"], "status": "missing", "switches": c.get("switches") or {},
                 "error": f"no {schema.RESULTS} in {d} (exit code {c.get('exit_code')})"}
        return abl.get("reference") or next(iter(cells)), cells
    res = schema.load_run(run_dir)[0]  # a cell folder, or a clear UserError
    return res.get("cell") or "cell", {res.get("cell") or "cell": res}


def measured(res: dict) -> list[dict]:
    return schema.measured(res.get("iterations") or [])


def stage_events(res: dict) -> list[dict]:
    return [e for e in (schema.load_events(res["_dir"]) if res.get("_dir") else [])
            if e["stage"] not in OUTSIDE_STAGES]


def _overhead_shares(res: dict, events: list[dict]) -> list[float]:
    """Per measured iteration: share of [start, end] in which no worker recorded a stage (every
    worker process is its own device now; the driver's queue waits count as covered)."""
    spans = defaultdict(list)  # iteration -> [(start, end)] of every worker's stages
    for e in events:
        spans[e["iteration"]].append((e["start"], e["end"]))
    out = []
    for it in measured(res):
        start, end = it["start"], it["end"]
        covered = [(max(s, start), min(e, end)) for s, e in spans.get(it["iteration"], [])]
        if end > start and covered:
            out.append(max(0.0,
                           1.0 - union_length([c for c in covered if c[1] > c[0]]) / (end - start)))
    return out


def stage_seconds(res: dict, events: list[dict], cpu: bool = False) -> dict[int, dict[str, float]]:
    """{measured iteration: {stage: seconds summed over every worker}}; rollout is averaged over the
    rollout workers instead (the queue path is compared with the rollout's wall time). cpu: the
    recording thread's CPU seconds where events have them (a stage's work, steady on a shared
    machine), else wall seconds."""
    keep = {it["iteration"] for it in measured(res)}
    out: dict = defaultdict(lambda: defaultdict(float))
    rollers = defaultdict(set)
    for e in events:
        if e["iteration"] in keep:
            use_cpu = cpu and e.get("cpu") is not None
            out[e["iteration"]][e["stage"]] += e["cpu"] if use_cpu else e["end"] - e["start"]
            if e["stage"] == "rollout":
                rollers[e["iteration"]].add(e["worker"])
    for k, workers in rollers.items():
        out[k]["rollout"] /= len(workers)
    return out


def _metric(family_name: str, fields: dict, value, cells: list[str], samples=None,
            **extra) -> dict[str, dict]:
    """{name: metric} of one metric of a family core/results/metric_table.py declares: name, kind,
    direction and description from its row, the name and description filled in with `fields`."""
    name, declared = check_metric(family_name, **fields)
    return {name: {"value": float(value), "samples": samples, **declared, "cells": cells, **extra}}


def _paired(num: dict, den: dict, family_name: str, cells: list[str],
            fields: dict) -> dict[str, dict]:
    """{name: metric} of the per-iteration log(num[k] / den[k]) over the iterations both have
    (positive values only); {} where there are none."""
    ks = [k for k in sorted(set(num) & set(den)) if num[k] > 0 and den[k] > 0]
    x = [float(np.log(num[k] / den[k])) for k in ks]
    if not x:
        return {}
    # "iterations": which iteration each sample is (`check --against` pairs the old and new tree by
    # it)
    return _metric(family_name, fields, np.exp(trimmed(x)[0]), cells, {"log_ratios": x},
                   iterations=ks)


def _pairs(cells: dict):
    """(switch, cell with it on, cell with it off) for two cells that differ in exactly that
    switch."""
    sw = {n: r.get("switches") or {} for n, r in cells.items()}
    for on_name, s_on in sw.items():
        for key, (on, off) in SWITCHES.items():
            if s_on.get(key) != on:
                continue
            drop = COMES_WITH.get(key, ())
            want = {k: v for k, v in {**s_on, key: off}.items() if k not in drop}
            for off_name, s_off in sw.items():
                if {k: v for k, v in s_off.items() if k not in drop} == want:
                    yield key, on_name, off_name


def _throughput_metrics(cells: dict, ref: str) -> dict:
    tpspd = {n: {it["iteration"]: float(it["tpspd"]) for it in measured(r)}
             for n, r in cells.items()}
    out = {}
    for n in cells:
        if n != ref:
            out.update(_paired(tpspd[n], tpspd[ref], "speedup", [n, ref], {"cell": n, "ref": ref}))
    for key, on, off in _pairs(cells):
        if off != ref:  # a pair with the reference is its speedup row already
            out.update(_paired(tpspd[on], tpspd[off], GAIN_NAMES[key], [on, off],
                               {"on": on, "off": off}))
    return out


def _component_metrics(cells: dict, cpu: dict) -> dict:
    """stage_cost and queue_cost rows, from CPU seconds (work, steady on a shared machine)."""
    out = {}
    for key, on, off in _pairs(cells):
        for stage in COMPONENT_STAGES[key]:
            num = {k: s.get(stage, 0.0) for k, s in cpu[on].items()}
            den = {k: s.get(stage, 0.0) for k, s in cpu[off].items()}
            out.update(_paired(num, den, "stage_cost", [on, off], {
                "stage": stage, "stage_what": STAGE_WHAT.get(stage, stage), "on": on, "off": off,
                "switch": key}))
        if key == "schedule":
            out.update(_same_accuracy(cells[on], cells[off], on, off))
            out.update(_same_start(cells[on], cells[off], on, off))
    out.update(_queue_cost(cells, cpu))
    return out


def _queue_cost(cells: dict, cpu: dict) -> dict[str, dict]:
    """The queue path's work, pooled over every cell that has one (the async cells share the code):
    per iteration, the consumers' handoff CPU seconds (opening each group taken off the queue) over
    the trainers' reward CPU seconds (scoring the same groups). Both are per-group Python work on
    the same data, so machine speed and the iteration's lengths cancel; measured on 6 unchanged CI
    runs, this pair varied least between runs (against the rollout, per token or absolute: 2-4x the
    run-level spread)."""
    names = [n for n in cells if any("handoff" in s for s in cpu[n].values())]
    if not names:
        return {}
    ks = sorted(set.intersection(*(set(cpu[n]) for n in names)))

    def pooled(stage: str) -> dict:
        return {k: sum(cpu[n][k].get(stage, 0.0) for n in names) for k in ks}

    return _paired(pooled("handoff"), pooled("reward"), "queue_cost", names,
                   {"cells": ",".join(names), "cell_list": ", ".join(names)})


def _final_accuracy(res: dict):
    evals = res.get("evals") or []
    return evals[-1]["accuracy"] if evals and evals[-1].get("iteration", 0) > 0 else None


def _same_accuracy(on: dict, off: dict, on_name: str, off_name: str) -> dict[str, dict]:
    a, b = _final_accuracy(on), _final_accuracy(off)
    if a is None or b is None:
        return {}
    return _metric("same_accuracy", {"on": on_name, "off": off_name}, a - b, [on_name, off_name])


def _same_start(on: dict, off: dict, on_name: str, off_name: str) -> dict[str, dict]:
    """Iteration 0 of both schedules starts from the same weights with the same seeds: the same
    samples, so exactly the same rewards, on every machine."""
    a, b = (on.get("iterations") or [{}])[0], (off.get("iterations") or [{}])[0]
    if "reward_mean" not in a or "reward_mean" not in b:
        return {}
    return _metric("same_start", {"on": on_name, "off": off_name},
                   a["reward_mean"] - b["reward_mean"],
                   [on_name, off_name])


def _cell_metrics(name: str, res: dict, events: list[dict]) -> dict:
    """overhead_share, accuracy and reward of one cell (those it has data for)."""
    out = {}
    shares = _overhead_shares(res, events)
    if shares:
        out.update(_metric("overhead_share", {"cell": name}, np.median(shares), [name],
                           {"values": shares}))
    acc = _final_accuracy(res)
    if acc is not None:  # the eval before training is no final accuracy
        out.update(_metric("accuracy", {"cell": name,
                                        "iteration": res["evals"][-1].get("iteration")}, acc,
                           [name]))
    its = res.get("iterations") or []
    if its:
        out.update(_metric("reward", {"cell": name},
                           np.mean([it["reward_mean"] for it in its[-3:]]), [name]))
    return out


def compute_metrics(run_dir: Path) -> dict:
    """Run or ablation folder -> {"reference", "cells": {name: {status, error, switches, config,
    provenance, planted_slowdown}}, "metrics": {name: {value, samples, direction, kind, cells,
    description}}}. A multi-seed run (`--seeds`, cells `<cell>@seed<s>`) is measured per seed, then
    pooled per metric (_pool_seeds): the same metric names as one seed's run, with more samples."""
    ref, cells = read_cells(run_dir)
    seeds = _split_seeds(ref, cells)
    if seeds:
        return _pool_seeds([_of_cells(r, c) for r, c in seeds.values()])
    return _of_cells(ref, cells)


def _split_seeds(ref: str, cells: dict) -> dict[int, tuple[str, dict]]:
    """{seed: (reference, {cell: results})} with the seed suffix dropped; {} unless every cell has
    one and there are several seeds."""
    split = {n: schema.split_seeded(n) for n in cells}
    seeds = sorted({s for _, s in split.values() if s is not None})
    if len(seeds) < 2 or any(s is None for _, s in split.values()):
        return {}
    base_ref = schema.split_seeded(ref)[0]
    return {seed: (base_ref,
                   {b: cells[n] for n, (b, s) in split.items() if s == seed}) for seed in seeds}


def _pool_seeds(parts: list[dict]) -> dict:
    """One seed's metrics per part -> pooled as the metric table's `seeds` says: paired ratios and
    overhead shares concatenate their per-iteration samples (value recomputed over all of them),
    accuracies average, an invariant keeps its worst seed; a cell's status is its worst seed's."""
    metrics = {}
    for name in dict.fromkeys(n for p in parts for n in p["metrics"]):
        ms = [p["metrics"][name] for p in parts if name in p["metrics"]]
        m = {**ms[0], "description": f"{ms[0]['description']} (pooled over {len(ms)} seeds)"}
        m.pop("iterations", None)  # iteration numbers repeat across seeds
        how = CHECK_FAMILIES[family(name)].seeds
        if how == "pooled":
            key = next(iter(m["samples"]))  # log_ratios (a paired ratio) or values (a share)
            x = [v for one in ms for v in one["samples"][key]]
            m.update(value=float(np.exp(trimmed(x)[0]) if key == "log_ratios" else np.median(x)),
                     samples={key: x})
        elif how == "worst":
            m["value"] = max((x["value"] for x in ms), key=abs)
        else:  # mean
            m["value"] = float(np.mean([x["value"] for x in ms]))
        metrics[name] = m
    cells = {}
    for p in parts:
        for n, info in p["cells"].items():
            if n not in cells or (info["status"] != "complete" and cells[n]["status"]
                                  == "complete"):
                cells[n] = info
    return {"reference": parts[0]["reference"], "cells": cells, "metrics": metrics}


def _of_cells(ref: str, cells: dict) -> dict:
    events = {n: stage_events(r) for n, r in cells.items()}
    cpu = {n: stage_seconds(r, events[n], cpu=True) for n, r in cells.items()}
    metrics = {**_throughput_metrics(cells, ref), **_component_metrics(cells, cpu)}
    for name, res in cells.items():
        metrics.update(_cell_metrics(name, res, events[name]))
    info = {n: {"status": r.get("status", "?"), "error": r.get("error"),
                "switches": r.get("switches") or {},
                "config": r.get("config"), "provenance": r.get("provenance") or {},
                "planted_slowdown": r.get("planted_slowdown") or {}} for n, r in cells.items()}
    return {"reference": ref, "cells": info, "metrics": metrics}
