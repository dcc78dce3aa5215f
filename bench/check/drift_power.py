"""The measured power of the drift verdict (bench/check/drift.py): histories assembled from the
entries of real A/B runs, judged for real.

Input: history entries of real `rlbench check --against` runs of one workload, whatever their
verdict (scripts/history_fixture.py writes them; tests/fixtures/history/measured.jsonl): unchanged
runs (nothing planted), runs planted with one small step (RLBENCH_SLOW=STAGE:0.02) and one large
(STAGE:0.16, eight steps). A history is PREFIX unchanged steps then STEPS more, each drawn with
replacement under a seed: for a drift, an unchanged entry whose planted metric (cost:STAGE) is that
of an entry of the small plant (planted_step); for an unchanged history, unchanged entries. An
unchanged run's entry may enter inverted (both sides are one commit: new / old and old / new are
equally likely). After the steps, an A/B against the anchor: an entry of the large plant, as
measured (a drift), or an unchanged one. Drawn histories share the few measured runs, so the rates
estimate what those runs' noise gives, they are not independent trials.

    python -m rlbench.check.drift_power FILE [SEEDS] [--other TREE]   # -> the rates, as
                                                                      docs/results/ci-gate.md
                                                                      # shows them; TREE: another
                                                                      checkout's rule
"""
from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from rlbench.check import drift, history

PREFIX, STEPS = 8, 8
SWAP = {"worse": "better", "better": "worse"}


def groups(path: Path) -> dict[str, list[dict]]:
    """The entries of a file by what was planted: "unchanged", or the RLBENCH_SLOW spec."""
    out: dict[str, list[dict]] = {}
    for e in history.read(path):
        out.setdefault((e.get("planted") or {}).get("RLBENCH_SLOW", "unchanged"), []).append(e)
    return out


def inverted(e: dict) -> dict:
    """An unchanged run's entry read the other way round (old / new): ratios and intervals
    inverted."""
    metrics = {n: {**m, "ratio": 1 / m["ratio"], "low": m["high"] and 1 / m["high"],
                   "high": m["low"] and 1 / m["low"], "mark": SWAP.get(m["mark"], m["mark"])}
               for n, m in e["metrics"].items()}
    return {**e, "metrics": metrics}


def moved(spec: str) -> list[str]:
    """The metrics a plant STAGE:F[,...] moves by itself: the per-unit cost of each stage it
    slows."""
    return [f"cost:{part.split(':')[0].strip()}" for part in spec.split(",") if part.strip()]


def planted_step(noise: dict, plant: dict, spec: str) -> dict:
    """One step of a drift: an unchanged run's entry (every metric's noise) with each planted
    metric's ratio and interval multiplied by what a real run of the plant measured. Not the planted
    run's entry itself: reused over the steps, its own noise on the other metrics would repeat and
    read as a drift of them too; nor its planted metric as measured: reused eight times, the drift's
    steps would carry no run-to-run noise at all, and the chain would see a clean ramp no real drift
    makes. The plant's own run's noise stays in its measured ratio, the same at every step
    (update:0.02 measured +2.0%)."""
    metrics = dict(noise["metrics"])
    for n in moved(spec):
        if n in plant["metrics"] and n in metrics:
            f, m = plant["metrics"][n]["ratio"], metrics[n]
            metrics[n] = {**m, "ratio": m["ratio"] * f, "low": m["low"] and m["low"] * f,
                          "high": m["high"] and m["high"] * f}
    return {**noise, "metrics": metrics, "planted": plant["planted"]}


def confirmed(first: dict, second: dict) -> dict:
    """An unchanged A/B against the anchor as `rlbench check` (--confirm) judges it: a paired metric
    stays worse only where a second run (another entry: assemble never draws the same run twice for
    it, as the confirming run is a second A/B run) flags it too (bench/check/confirm.py)."""
    metrics = {n: {**m, "mark": "not significant"} if m["mark"] == "worse" and
               (second["metrics"].get(n) or {}).get("mark") != "worse" else m
               for n, m in first["metrics"].items()}
    return {**first, "metrics": metrics}


def assemble(runs: dict[str, list[dict]], seed: int, step: str | None,
             anchor: str | None) -> list[dict]:
    """PREFIX unchanged steps, an A/B of c08 against the anchor c00 (an unchanged run), STEPS steps
    of the plant `step` (None: unchanged), commits c08 -> c16, then an A/B of c16 against c00 from
    the plant `anchor` (None: an unchanged run). -> the entries (the last one: the final anchor
    A/B)."""
    rng = np.random.default_rng(seed)

    def draw(spec: str | None) -> dict:
        pool = runs[spec or "unchanged"]
        e = pool[rng.integers(len(pool))]
        return inverted(e) if spec is None and rng.integers(2) else e

    def drawn_step() -> dict:
        return planted_step(draw(None), draw(step), step) if step else draw(None)

    def two_runs() -> dict:
        """An unchanged A/B against the anchor and its confirming run: two different runs, each
        either way round (the same entry twice would confirm every flag of that one run by
        itself)."""
        pool = runs["unchanged"]
        i, j = rng.choice(len(pool), size=2, replace=False)
        first, second = (inverted(pool[k]) if rng.integers(2) else pool[k] for k in (i, j))
        return confirmed(first, second)

    steps = [draw(None) for _ in range(PREFIX)] + [drawn_step() for _ in range(STEPS)]
    out = [{**e, "kind": "step", "old_commit": f"c{k:02d}", "new_commit": f"c{k + 1:02d}"}
           for k, e in enumerate(steps)]
    # `--anchor-every 8`: an A/B against the anchor after the unchanged steps (nothing planted yet),
    # and one at the end (of the large plant, for a drift)
    first = {**two_runs(), "kind": "anchor", "old_commit": "c00", "new_commit": f"c{PREFIX:02d}"}
    final = draw(anchor) if anchor else two_runs()
    last = {**final, "kind": "anchor", "old_commit": "c00", "new_commit": f"c{len(steps):02d}"}
    return out[:PREFIX] + [first] + out[PREFIX:] + [last]


def study(runs: dict[str, list[dict]], step: str, anchor: str, seeds: int = 100, judge=drift.judge,
          draw=None) -> dict:
    """Over `seeds` drift and unchanged histories (drawn by `draw`, assemble's signature; None:
    assemble): how often the drift verdict `judge` fails before the last anchor A/B and after it,
    how often a change point is at least suspected before it (the anchor A/B due: Drift.suspected,
    where `judge` has it), and on which metrics."""
    n = Counter()
    metrics = {True: Counter(), False: Counter()}
    for seed in range(seeds):
        for drifting in (True, False):
            entries = (draw or assemble)(runs, seed, step if drifting else None,
                                         anchor if drifting else None)
            wl = entries[0]["workload"]
            first, final = judge(entries[:-1], wl), judge(entries, wl)
            failing = {cp.metric for cp, _ in first.failures}
            raised = failing | {cp.metric for cp, _ in getattr(first, "suspected", [])}
            n[drifting, "fails"] += bool(failing)
            n[drifting, "raised"] += bool(raised)
            n[drifting, "planted"] += any(name in raised for name in moved(step))
            n[drifting, "after"] += final.exit_code
            metrics[drifting].update(raised)
    return {"seeds": seeds, "n": n, "metrics": metrics,
            "runs": {k: len(v) for k, v in runs.items()}}


def format_study(res: dict, step: str, anchor: str, label: str = "") -> str:
    n, k = res["seeds"], res["n"]
    return "\n".join([
        f"{label}Measured entries: {', '.join(f'{a} {b}' for a, b in res['runs'].items())}. "
        f"Histories of {PREFIX} unchanged steps then {STEPS} steps of {step} (drift) or unchanged, "
        f"{n} seeds each",
        f"- drift: failing before the anchor A/B {k[True, 'fails']}/{n}, raised (failing or "
        f"suspected) {k[True, 'raised']}/{n} ({', '.join(moved(step))} in {k[True, 'planted']}); "
        f"failing after the anchor A/B ({anchor}) {k[True, 'after']}/{n}; metrics raised: "
        f"{dict(res['metrics'][True].most_common(6))}",
        f"- unchanged: failing before the anchor A/B {k[False, 'fails']}/{n}, raised "
        f"{k[False, 'raised']}/{n}; failing after it {k[False, 'after']}/{n}; metrics raised: "
        f"{dict(res['metrics'][False].most_common(6))}"])


def other_tree(root: Path):
    """(judge, assemble) of another checkout's bench/check/drift.py and drift_power.py, loaded by
    path beside this one's (the rest, history.py included, is this tree's): the old rule and drawing
    on the same seeds."""
    mods = []
    for name in ("drift", "drift_power"):
        spec = importlib.util.spec_from_file_location(f"_other_{name}",
                                                      Path(root) / "bench" / "check" / f"{name}.py")
        # dataclasses look their module up
        mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods[0].judge, mods[1].assemble


def main(argv: list[str]) -> int:
    """FILE [SEEDS] [--other TREE]: with another checkout, its rule and drawing crossed with this
    one's."""
    other = Path(argv[argv.index("--other") + 1]) if "--other" in argv else None
    args = [a for i, a in enumerate(argv) if a != "--other"
                     and (i == 0 or argv[i - 1] != "--other")]
    runs = groups(Path(args[0]))
    step = next(k for k in runs if k.endswith(":0.02"))
    anchor = next(k for k in runs if k.endswith(":0.16"))
    seeds = int(args[1]) if len(args) > 1 else 100
    combos = [("this rule, this drawing", drift.judge, None)]
    if other:
        old_judge, old_draw = other_tree(other)
        combos += [("other rule, other drawing", old_judge, old_draw),
                   ("other rule, this drawing", old_judge, None),
                   ("this rule, other drawing", drift.judge, old_draw)]
    for label, judge, draw in combos:
        print(format_study(study(runs, step, anchor, seeds, judge, draw), step, anchor,
                           f"[{label}] "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
