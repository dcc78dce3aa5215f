"""The measured power of the drift verdict (bench/check/drift.py): histories assembled from the entries of real
A/B runs, judged for real.

Input: history entries of real `rlbench check --against` runs of one workload, whatever their verdict
(scripts/history_fixture.py writes them; tests/fixtures/history/measured.jsonl): unchanged runs (nothing
planted), runs planted with one small step (RLBENCH_SLOW=STAGE:0.02) and one large (STAGE:0.16, eight steps).
A history is PREFIX unchanged steps then STEPS more, each drawn with replacement under a seed: for a drift,
an unchanged entry whose planted metric (cost:STAGE) is that of an entry of the small plant (planted_step);
for an unchanged history, unchanged entries. An unchanged run's entry may enter inverted (both sides are one
commit: new / old and old / new are equally likely). After the steps, an A/B against the anchor: an entry of
the large plant, as measured (a drift), or an unchanged one. Drawn histories share the
few measured runs, so the rates estimate what those runs' noise gives, they are not independent trials.

    python -m rlbench.check.drift_power FILE [SEEDS]   # -> the rates, as docs/results/ci-gate.md shows them
"""
from __future__ import annotations

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
    """An unchanged run's entry read the other way round (old / new): ratios and intervals inverted."""
    metrics = {n: {**m, "ratio": 1 / m["ratio"], "low": m["high"] and 1 / m["high"],
                   "high": m["low"] and 1 / m["low"], "mark": SWAP.get(m["mark"], m["mark"])}
               for n, m in e["metrics"].items()}
    return {**e, "metrics": metrics}


def moved(spec: str) -> list[str]:
    """The metrics a plant STAGE:F[,...] moves by itself: the per-unit cost of each stage it slows."""
    return [f"cost:{part.split(':')[0].strip()}" for part in spec.split(",") if part.strip()]


def planted_step(noise: dict, plant: dict, spec: str) -> dict:
    """One step of a drift: an unchanged run's entry (every metric's noise) with the planted metrics' ratios,
    intervals and marks from a real run of the plant. Not the planted run's entry itself: reused over the
    steps, its own noise on the other metrics would repeat and read as a drift of them too."""
    metrics = dict(noise["metrics"])
    metrics.update({n: plant["metrics"][n] for n in moved(spec) if n in plant["metrics"]})
    return {**noise, "metrics": metrics, "planted": plant["planted"]}


def confirmed(first: dict, second: dict) -> dict:
    """An unchanged A/B against the anchor as `rlbench check` (--confirm) judges it: a paired metric stays
    worse only where a second run (another entry) flags it too (bench/check/confirm.py)."""
    metrics = {n: {**m, "mark": "not significant"} if m["mark"] == "worse" and
               (second["metrics"].get(n) or {}).get("mark") != "worse" else m for n, m in first["metrics"].items()}
    return {**first, "metrics": metrics}


def assemble(runs: dict[str, list[dict]], seed: int, step: str | None, anchor: str | None) -> list[dict]:
    """PREFIX unchanged steps, an A/B of c08 against the anchor c00 (an unchanged run), STEPS steps of the
    plant `step` (None: unchanged), commits c08 -> c16, then an A/B of c16 against c00 from the plant
    `anchor` (None: an unchanged run). -> the entries (the last one: the final anchor A/B)."""
    rng = np.random.default_rng(seed)

    def draw(spec: str | None) -> dict:
        pool = runs[spec or "unchanged"]
        e = pool[rng.integers(len(pool))]
        return inverted(e) if spec is None and rng.integers(2) else e

    def drawn_step() -> dict:
        return planted_step(draw(None), draw(step), step) if step else draw(None)

    steps = [draw(None) for _ in range(PREFIX)] + [drawn_step() for _ in range(STEPS)]
    out = [{**e, "kind": "step", "old_commit": f"c{k:02d}", "new_commit": f"c{k + 1:02d}"} for k, e in enumerate(steps)]
    # `--anchor-every 8`: an A/B against the anchor after the unchanged steps (nothing planted yet), and one at
    # the end (of the large plant, for a drift)
    first = {**confirmed(draw(None), draw(None)), "kind": "anchor", "old_commit": "c00", "new_commit": f"c{PREFIX:02d}"}
    final = draw(anchor) if anchor else confirmed(draw(None), draw(None))
    last = {**final, "kind": "anchor", "old_commit": "c00", "new_commit": f"c{len(steps):02d}"}
    return out[:PREFIX] + [first] + out[PREFIX:] + [last]


def study(runs: dict[str, list[dict]], step: str, anchor: str, seeds: int = 100) -> dict:
    """Over `seeds` drift and unchanged histories: how often the drift verdict fails (before the anchor A/B,
    and after it: confirmed), on which metrics, and how often an unchanged history fails."""
    caught, confirmed, alarms, after = 0, 0, 0, 0
    metrics, alarm_metrics = Counter(), Counter()
    for seed in range(seeds):
        for drifting in (True, False):
            entries = assemble(runs, seed, step if drifting else None, anchor if drifting else None)
            wl = entries[0]["workload"]
            first, final = drift.judge(entries[:-1], wl), drift.judge(entries, wl)
            names = {cp.metric for cp, _ in first.failures}
            if drifting:
                caught += bool(names)
                confirmed += final.exit_code
                metrics.update(names)
            else:
                alarms += bool(names)
                after += final.exit_code
                alarm_metrics.update(names)
    return {"seeds": seeds, "caught": caught, "confirmed": confirmed, "alarms": alarms, "alarms_after_anchor": after,
            "metrics": metrics, "alarm_metrics": alarm_metrics, "runs": {k: len(v) for k, v in runs.items()}}


def format_study(res: dict, step: str, anchor: str) -> str:
    n = res["seeds"]
    return "\n".join([
        f"Measured entries: {', '.join(f'{k} {v}' for k, v in res['runs'].items())}. Histories of {PREFIX} "
        f"unchanged steps then {STEPS} steps of {step} (drift) or unchanged, {n} seeds each; drift verdict: a "
        f"regression's change point among the last {drift.LAST_N} steps (Otava p < {drift.MAX_PVALUE:g}, beyond "
        "the metric's floor and the chained interval)",
        f"- drift caught before the anchor A/B: {res['caught']}/{n}; still failing after the anchor A/B "
        f"({anchor}): {res['confirmed']}/{n}; metrics: {dict(res['metrics'].most_common(6))}",
        f"- unchanged histories failing: {res['alarms']}/{n} before the anchor A/B, {res['alarms_after_anchor']}/{n} "
        f"after it; metrics: {dict(res['alarm_metrics'].most_common(6))}"])


def main(argv: list[str]) -> int:
    runs = groups(Path(argv[0]))
    step = next(k for k in runs if k.endswith(":0.02"))
    anchor = next(k for k in runs if k.endswith(":0.16"))
    print(format_study(study(runs, step, anchor, int(argv[1]) if len(argv) > 1 else 100), step, anchor))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
