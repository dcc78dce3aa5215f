"""How soon the history's drift verdict (bench/check/drift.py) names a creeping regression, and how often it names
one that is not there: the repository's own history continued by simulated landings whose noise is that of the
history's own steps.

Each simulated landing is one of the workload's real steps on its current chain (all its metrics: their
scatter and how they move together), drawn under a seed, each metric's log-ratio taken about its median over
those steps and given a random sign (an A/B of unchanged code is as likely new / old as old / new). A drift
multiplies one metric's ratio by (1 + --drift) a landing from the first one on: recorded as the repository
records landings while ACCEPTED stays (--mode siblings: every landing against the anchor, so landing j carries
j steps of the drift), or chained (--mode chain: each against the one before, one step each). After every
landing the verdict is judged (`rlbench history`'s first screen): a drift is *named* where the metric is
suspected or failing. Unchanged histories: the same landings with nothing planted; any metric named is a false
drift. Prints a markdown table (docs/results/ci-gate.md, 'Drift over the history').

    .venv/bin/python scripts/drift_study.py --seeds 10 --unchanged 20
"""
from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import numpy as np

from rlbench.check import drift, history

ROOT = Path(__file__).resolve().parents[1]


def pool_of(entries: list[dict], wl: dict) -> tuple[list[dict], dict[str, float]]:
    """The workload's steps on its current chain, and each metric's median log-ratio over them."""
    steps = [entries[i] for i in history.chain_of(entries, wl).steps]
    names = {n for e in steps for n in e["metrics"]}
    med = {n: statistics.median(math.log(e["metrics"][n]["ratio"]) for e in steps if n in e["metrics"]) for n in names}
    return steps, med


def landing(rng, pool: list[dict], med: dict, old: str, new: str, planted: dict[str, float]) -> dict:
    """One simulated landing: a drawn real step's metrics about their medians, a random sign, the plant."""
    e = pool[rng.integers(len(pool))]
    sign = 1 if rng.integers(2) else -1
    metrics = {}
    for n, m in e["metrics"].items():
        f = math.exp(sign * (math.log(m["ratio"]) - med[n])) * planted.get(n, 1.0)
        metrics[n] = {**m, "ratio": f, "low": m["low"] and f * (m["low"] / m["ratio"]) ** sign,
                      "high": m["high"] and f * (m["high"] / m["ratio"]) ** sign, "mark": "not significant"}
        if sign < 0 and metrics[n]["low"] and metrics[n]["high"]:
            metrics[n]["low"], metrics[n]["high"] = metrics[n]["high"], metrics[n]["low"]
    return {**e, "kind": "step", "old_commit": old, "new_commit": new, "reanchor": False, "metrics": metrics,
            "confirmed_by": None}


def continued(base: list[dict], wl: dict, seed: int, steps: int, mode: str, metric: str | None, rise: float):
    """Yield the history after each of `steps` simulated landings (metric None: nothing planted)."""
    rng = np.random.default_rng(seed)
    pool, med = pool_of(base, wl)
    c = history.chain_of(base, wl)
    last = base[c.steps[-1]]["new_commit"] if c.steps else c.anchor
    entries = list(base)
    for j in range(1, steps + 1):
        old = c.anchor if mode == "siblings" else last
        rise_j = (1 + rise) ** (j if mode == "siblings" else 1)
        new = f"sim{seed:03d}{j:02d}"
        entries.append(landing(rng, pool, med, old, new, {metric: rise_j} if metric else {}))
        last = new
        yield j, entries


def named(entries: list[dict], wl: dict) -> set[str]:
    res = drift.judge(entries, wl)
    return {cp.metric for cp, _ in res.failures + res.suspected}


def study(base: list[dict], wl: dict, mode: str, metric: str, rise: float, seeds: int, unchanged: int,
          steps: int) -> dict:
    """First landing that names the planted metric, per seed (None: never); unchanged histories naming any."""
    first, wrong = [], []
    for seed in range(seeds):
        hit = None
        for j, entries in continued(base, wl, seed, steps, mode, metric, rise):
            if metric in named(entries, wl):
                hit = j
                break
        first.append(hit)
    for seed in range(1000, 1000 + unchanged):
        seen = set()
        for _, entries in continued(base, wl, seed, steps, mode, None, 0.0):
            seen |= named(entries, wl)
        wrong.append(seen)
    return {"first": first, "wrong": wrong}


def row(wl: dict, mode: str, metric: str, rise: float, res: dict, within: int) -> str:
    hits = sum(1 for f in res["first"] if f is not None and f <= within)
    false = sum(1 for w in res["wrong"] if w)
    names = sorted({n for w in res["wrong"] for n in w})
    return (f"| {wl['config']} | {mode} | {metric} +{rise:.1%} a landing | {hits}/{len(res['first'])} "
            f"| {', '.join('-' if f is None else str(f) for f in res['first'])} | {false}/{len(res['wrong'])} "
            f"| {', '.join(names) or '-'} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--history", type=Path, default=ROOT / "bench" / "baselines" / "history.jsonl")
    p.add_argument("--workload", action="append", help="config of a workload in the history (repeatable; "
                   "default: every workload)")
    p.add_argument("--mode", action="append", choices=("siblings", "chain"), help="default: both")
    p.add_argument("--metric", default="cost:update")
    p.add_argument("--drift", type=float, default=0.015, help="the planted rise a landing")
    p.add_argument("--steps", type=int, default=10, help="simulated landings")
    p.add_argument("--within", type=int, default=6, help="named within this many landings counts as detected")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--unchanged", type=int, default=20)
    a = p.parse_args()
    base = history.read(a.history)
    wls = [wl for wl in drift.workloads(base) if not a.workload or wl["config"] in a.workload]
    print(f"| workload | recorded as | planted | named within {a.within} landings | landing it was first named, "
          "per seed | unchanged histories naming a drift | metrics named there |")
    print("|---|---|---|---|---|---|---|")
    for wl in wls:
        for mode in a.mode or ("siblings", "chain"):
            res = study(base, wl, mode, a.metric, a.drift, a.seeds, a.unchanged, a.steps)
            print(row(wl, mode, a.metric, a.drift, res, a.within), flush=True)


if __name__ == "__main__":
    main()
