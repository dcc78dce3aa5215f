"""The measured power of the drift verdict (bench/check/drift.py): histories assembled from the entries of real
A/B runs, judged for real.

Input: history entries of real `rlbench check --against` runs of one workload, whatever their verdict
(scripts/history_fixture.py writes them; tests/fixtures/history/measured.jsonl): unchanged runs (nothing
planted), runs planted with one small step (RLBENCH_SLOW=STAGE:0.02) and one large (STAGE:0.16, eight steps).
A history is PREFIX unchanged steps then STEPS more, each drawn with replacement under a seed: for a drift,
entries of the small plant; for an unchanged history, unchanged entries. An unchanged run's entry may enter
inverted (both sides are one commit: new / old and old / new are equally likely). After the steps, an A/B
against the anchor: an entry of the large plant (a drift) or an unchanged one. Drawn histories share the
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


def assemble(runs: dict[str, list[dict]], seed: int, step: str | None, anchor: str | None) -> list[dict]:
    """PREFIX unchanged steps, STEPS steps of the plant `step` (None: unchanged), commits c00 -> c16, then an
    A/B of the last commit against c00 from the plant `anchor` (None: an unchanged run). -> the entries."""
    rng = np.random.default_rng(seed)

    def draw(spec: str | None) -> dict:
        pool = runs[spec or "unchanged"]
        e = pool[rng.integers(len(pool))]
        return inverted(e) if spec is None and rng.integers(2) else e

    steps = [draw(None) for _ in range(PREFIX)] + [draw(step) for _ in range(STEPS)]
    out = [{**e, "kind": "step", "old_commit": f"c{k:02d}", "new_commit": f"c{k + 1:02d}"} for k, e in enumerate(steps)]
    return out + [{**draw(anchor), "kind": "anchor", "old_commit": "c00", "new_commit": f"c{len(steps):02d}"}]


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
