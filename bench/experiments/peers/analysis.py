"""`--ablation peers`: rlbench beside a real framework, TRL's GRPOTrainer, on the same devices and
workload (the cells: cells.py), computed from the run's result files into peers.csv, which the
terminal and the report render (report.py, "Against a real framework"); run.py runs a peer
framework's cells.

Each cell's TPSPD over sync's is stated with its 95% interval from the per-iteration ratios
(iteration k of every cell back to back when they take turns): faster or slower only where the
interval excludes 1.

Where the TPSPD difference comes from: device-seconds per 1,000 trained tokens, pooled over the
measured iterations, split by stage (summed over workers) plus `other` (device time in no stage:
idle, and a peer's work outside the stages rlbench names). 1000 / TPSPD is that total, so the stage
deltas between two cells add up to the difference of their totals exactly. The same by the stage
events' CPU seconds (cpu_<stage>_s_per_ktok) is each stage's own compute: what neither waiting for
another rank nor another job on the machine adds to, so it compares the engines' work on a busy
machine too.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd
from rlbench.analysis import intervals
from rlbench.analysis.data import CellData, load
from rlbench.analysis.speedup import reference_of, turn_group
from rlbench.core.results.schema import measured, ratio
from rlbench.core.experiments.spec import Analysis
from rlbench.core.schedules import by_role
from rlbench.core.schedules.spec import REFERENCE

_REF = by_role(REFERENCE).name
CSV = "peers.csv"
STAGES = ("rollout", "reward", "old_logprob", "ref_logprob", "advantage", "update",
          "optimizer_step",
          "weight_sync", "queue_wait", "handoff")


def write_peers(run_dir) -> Path | None:
    """peers.csv in run_dir when the run holds a TRL cell and an rlbench sync cell; -> its path, or
    None (an earlier peers.csv is removed: it would describe other cells)."""
    run = load(run_dir)
    path = Path(run_dir) / CSV
    frame = peers_frame(run)
    if frame is None:
        path.unlink(missing_ok=True)
        return None
    frame.to_csv(path, index=False)
    return path


def peers_frame(run):
    """One row per cell (a pandas DataFrame), or None without both an rlbench sync cell and a peer's
    cell. Where the cells took turns in pairs (run.interleave_pairs), sync's runs beside each other
    cell are pooled into one row named after it, and every other row is measured against the sync
    run it took turns with."""
    sync = next((c for c in run.cells if c.schedule == _REF and c.iterations), None)
    if sync is None or not any(_is_peer(c) for c in run.cells):
        return None
    runs = [c for c in run.cells if turn_group(c) and reference_of(run,
                                                                   c) is c and c.schedule == _REF]
    if runs:  # in pairs: every cell against its own pair's sync run
        sync = _pooled(runs, split_ref(runs[0].name))
        shown, ref_of = [sync] + [c for c in run.cells if c
                                  not in runs], lambda c: reference_of(run, c)
    else:
        shown, ref_of = run.cells, lambda c: sync
    frame = pd.DataFrame([_row(c, sync if c is sync else ref_of(c), c is sync) for c in shown])
    peer = next(c for c in shown if _is_peer(c))
    peer_vs_sync = float(frame.loc[frame["cell"] == peer.name, "vs_sync"].iloc[0])
    # over the first peer cell's TPSPD: (cell / its sync) / (peer / its sync), the direct ratio
    # without pairs
    frame["vs_peer"] = [None if v is None or v != v else v / peer_vs_sync for v in frame["vs_sync"]]
    frame["peer"] = peer.name
    return frame


def split_ref(name: str) -> str:
    """'sync@trl' -> 'sync': the reference cell's name without the cell it took turns with."""
    return name.split("@", 1)[0]


def _is_peer(c) -> bool:
    return c.switches.get("engine") not in (None, "rlbench")


def _pooled(runs: list, name: str):
    """The reference cell's runs (one per pair) as one cell: their iterations and events together
    (the same iteration numbers, so per-iteration sums add over the runs), TPSPD median and range
    over all of them."""
    its = [it for c in runs for it in c.iterations]
    tp = [it["tpspd"] for it in measured(its) if it.get("tpspd")]
    walls = [it["wall_s"] for it in measured(its)]
    agg = {**runs[0].aggregates,
           "tpspd": {"median": statistics.median(tp), "min": min(tp), "max": max(tp)}
           if tp else {}, "wall_s": {"median": statistics.median(walls)} if walls else {},
           "staleness_max": max((c.aggregates.get("staleness_max") or 0) for c in runs)}
    result = {**runs[0].result, "iterations": its, "aggregates": agg,
              "status": "complete" if all(c.status == "complete" for c in runs) else "incomplete"}
    return CellData(f"{name} ({len(runs)} runs, one per pair)" if len(runs) > 1 else name,
                    runs[0].dir, result,
                    [e for c in runs for e in c.events], [x for c in runs for x in c.samples])


def _row(c, sync, is_ref: bool = False) -> dict:
    """A cell's row; sync: the sync run it is measured against (the stage columns minus sync's add
    up to the difference of the totals: the module docstring)."""
    own = _per_ktok(c)
    ref = own if is_ref else _per_ktok(sync)
    evals = c.result.get("evals") or []
    paired = {"vs_sync": 1.0, "vs_sync_paired_min": 1.0, "vs_sync_paired_max": 1.0,
              **intervals.columns(intervals.Ratio(1.0), "vs_sync")} if is_ref else \
        {"vs_sync": ratio(c.tpspd(), sync.tpspd()), **_paired(c, sync)}
    return {"cell": c.name, "engine": c.switches.get("engine") or "rlbench", "schedule": c.schedule,
            "steps_per_generation": c.switches.get("steps_per_generation", 1),
            "continuous_batching": c.switches.get("continuous_batching"), "devices": c.devices,
            "tpspd_median": c.tpspd(), "tpspd_min": c.tpspd("min"), "tpspd_max": c.tpspd("max"),
            **paired, "against": sync.name,
            "wall_s_median": (c.aggregates.get("wall_s") or {}).get("median"),
            **own, **{f"{k}_vs_sync": _minus(own[f"{k}_s_per_ktok"], ref[f"{k}_s_per_ktok"])
                      for k in (*STAGES, "other", "total")},
            "staleness_max": c.aggregates.get("staleness_max"),
            "accuracy_first": evals[0]["accuracy"] if evals else None,
            "accuracy_final": evals[-1]["accuracy"] if evals else None, "status": c.status}


def _per_ktok(c) -> dict:
    """Device- and CPU-seconds per 1,000 trained tokens by stage over the measured iterations,
    tokens per iteration, mean response length, on-core share."""
    its = measured(c.iterations)
    tokens = sum(it["tokens"] for it in its) or None
    per_k = lambda s: None if not tokens else 1000 * s / tokens
    stages = {f"{s}_s_per_ktok": per_k(sum(it["stage_s"].get(s, 0.0) for it in its)) for s
                                 in STAGES}
    cpu = _cpu_seconds(c, {it["iteration"] for it in its})
    total = per_k(sum(it["wall_s"] * it["devices"] for it in its))
    named = sum(v for v in stages.values() if v is not None)
    return {"tokens_per_iteration": tokens / len(its) if tokens else None,
            "response_len_mean": _mean([it["response_len_mean"] for it in its]),
            **stages, "other_s_per_ktok": None if total is None else total - named,
            "total_s_per_ktok": total,
            **{f"cpu_{s}_s_per_ktok": per_k(cpu[s]) if s in cpu else None for s in STAGES},
            "cpu_total_s_per_ktok": per_k(sum(cpu.values())) if cpu else None,
            "on_cpu_pct": _on_cpu_pct(c, {it["iteration"] for it in its})}


def _minus(a, b):
    """a - b, a missing stage counting as 0 (its cell does not run it); None where neither has
    it."""
    return None if a is None and b is None else (a or 0.0) - (b or 0.0)


def _cpu_seconds(c, iterations: set[int]) -> dict[str, float]:
    """stage -> CPU seconds of its recording threads over these iterations (the stage events' `cpu`:
    a stage's own compute, which neither a wait for another rank nor another job on the core adds
    to)."""
    out: dict[str, float] = {}
    for e in c.events:
        if e["iteration"] in iterations and e.get("cpu") is not None and e["stage"] in STAGES:
            out[e["stage"]] = out.get(e["stage"], 0.0) + e["cpu"]
    return out


def _on_cpu_pct(c, iterations: set[int]) -> float | None:
    """Share of their wall time the pinned workers spent on a core in the stages that compute alone
    (no wait for another rank inside): 100 unless other processes took their cores, so it says how
    loaded the machine was while this cell ran."""
    alone = {"rollout", "old_logprob", "ref_logprob"}
    spans = [(e["end"] - e["start"], e["cpu"]) for e in c.events
             if e["iteration"] in iterations and e["stage"] in alone and e.get("cpu") is not None]
    wall = sum(w for w, _ in spans)
    return 100 * sum(cpu for _, cpu in spans) / wall if wall > 0 else None


def _paired(c, sync) -> dict:
    """Min and max over the measured iterations of this cell's TPSPD over the sync cell's same
    iteration (taken back to back when the cells take turns), and the 95% interval of the ratio they
    give (analysis/intervals.py: vs_sync_low, _high, _n, _basis)."""
    ours = {it["iteration"]: it["tpspd"] for it in measured(sync.iterations)}
    r = [ratio(it["tpspd"],
               ours[it["iteration"]]) for it in measured(c.iterations) if it["iteration"] in ours]
    r = [v for v in r if v is not None]
    return {"vs_sync_paired_min": min(r, default=None), "vs_sync_paired_max": max(r, default=None),
            **intervals.columns(intervals.paired(c, sync), "vs_sync", "vs_sync")}


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


ANALYSIS = Analysis(write=write_peers)
