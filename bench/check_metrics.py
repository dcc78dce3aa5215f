"""What `rlbench check` compares, computed from a run's result files (reads files only).

Metric names are ``name:cells``:
  speedup:<cell>/<ref>       median per-iteration TPSPD of a cell / median of the reference cell
  <switch>_gain:<on>/<off>   the same ratio for two cells differing in one switch (tri_model_gain,
                             shared_prompt_gain, async_gain)
  overhead_share:<cell>      share of iteration wall time outside every stage of every worker
  accuracy:<cell>, reward:<cell>   final eval pass@1; training reward of the last 3 iterations
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from rlbench import schema
from rlbench.metrics import union_length

# switch -> (value with the switch on, value with it off)
SWITCHES = {"schedule": ("periodic_async", "sync"), "tri_model": (True, False), "shared_prompt": (True, False)}
GAIN_NAMES = {"schedule": "async_gain", "tri_model": "tri_model_gain", "shared_prompt": "shared_prompt_gain"}


def _read_cells(run_dir: Path) -> tuple[str, dict[str, dict]]:
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


def _measured(res: dict) -> list[dict]:
    return schema.measured(res.get("iterations") or [])


def _overhead_shares(res: dict) -> list[float]:
    """Per measured iteration: share of [start, end] in which no worker recorded a stage (every worker
    process is its own device now; the driver's queue waits count as covered)."""
    events = schema.load_events(res["_dir"]) if res.get("_dir") else []
    spans = defaultdict(list)  # iteration -> [(start, end)] of every worker's stages
    for e in events:
        if e["stage"] != "eval":
            spans[e["iteration"]].append((e["start"], e["end"]))
    out = []
    for it in _measured(res):
        start, end = it["start"], it["end"]
        covered = [(max(s, start), min(e, end)) for s, e in spans.get(it["iteration"], [])]
        if end > start and covered:
            out.append(max(0.0, 1.0 - union_length([c for c in covered if c[1] > c[0]]) / (end - start)))
    return out


def _metric(value, kind: str, direction: str, cells: list[str], description: str, samples=None) -> dict:
    return {"value": float(value), "samples": samples, "direction": direction, "kind": kind,
            "cells": cells, "description": description}


def _ratio(name: str, num: str, den: str, tpspd: dict, what: str) -> tuple[str, dict] | None:
    if not tpspd[num] or not tpspd[den] or np.median(tpspd[den]) <= 0:
        return None
    value = float(np.median(tpspd[num]) / np.median(tpspd[den]))
    return name, _metric(value, "ratio", "higher_is_better", [num, den],
                         f"{what}: median TPSPD of {num} / median TPSPD of {den}",
                         {"numerator": tpspd[num], "denominator": tpspd[den]})


def _switch_pairs(cells: dict, ref: str):
    """(switch, cell with it on, cell with it off) for two cells that differ in exactly that switch."""
    sw = {n: r.get("switches") or {} for n, r in cells.items()}
    for on_name, s_on in sw.items():
        for key, (on, off) in SWITCHES.items():
            if s_on.get(key) != on:
                continue
            for off_name, s_off in sw.items():  # a pair with the reference is a speedup row already
                if s_off == {**s_on, key: off} and off_name != ref:
                    yield key, on_name, off_name


def _cell_metrics(name: str, res: dict) -> dict:
    """overhead_share, accuracy and reward of one cell (those it has data for)."""
    out = {}
    shares = _overhead_shares(res)
    if shares:
        out[f"overhead_share:{name}"] = _metric(
            np.median(shares), "share", "lower_is_better", [name],
            "median share of iteration wall time outside every stage of the main worker",
            {"values": shares})
    evals = res.get("evals") or []
    if evals and evals[-1].get("iteration", 0) > 0:  # the eval before training is no final accuracy
        out[f"accuracy:{name}"] = _metric(evals[-1]["accuracy"], "accuracy", "higher_is_better", [name],
                                          f"final eval pass@1 (after iteration {evals[-1].get('iteration')})")
    its = res.get("iterations") or []
    if its:
        out[f"reward:{name}"] = _metric(np.mean([it["reward_mean"] for it in its[-3:]]), "accuracy",
                                        "higher_is_better", [name], "mean training reward, last 3 iterations")
    return out


def compute_metrics(run_dir: Path) -> dict:
    """Run or ablation folder -> {"reference", "cells": {name: {status, error, switches, config,
    provenance}}, "metrics": {name: {value, samples, direction, kind, cells, description}}}."""
    ref, cells = _read_cells(run_dir)
    tpspd = {n: [float(it["tpspd"]) for it in _measured(r)] for n, r in cells.items()}
    found = [_ratio(f"speedup:{n}/{ref}", n, ref, tpspd, "TPSPD speedup over the reference")
             for n in cells if n != ref]
    found += [_ratio(f"{GAIN_NAMES[k]}:{on}/{off}", on, off, tpspd, f"TPSPD gain of {k}")
              for k, on, off in _switch_pairs(cells, ref)]
    metrics = dict(m for m in found if m)
    for name, res in cells.items():
        metrics.update(_cell_metrics(name, res))
    info = {n: {"status": r.get("status", "?"), "error": r.get("error"), "switches": r.get("switches") or {},
                "config": r.get("config"), "provenance": r.get("provenance") or {}} for n, r in cells.items()}
    return {"reference": ref, "cells": info, "metrics": metrics}
