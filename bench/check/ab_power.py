"""`rlbench check --calibrate AB_DIR...`: the measured power of `rlbench check --against` from real A/B runs.

- False alarms: every unchanged A/B run (old and new the same commit, nothing planted) judged end to end
  as `check --against` judges it; each is an independent run, nothing resampled. The rate comes with its
  exact (Clopper-Pearson) one-sided 95% upper bound.
- Detection, as measured: each unchanged run again, with a component's metrics shifted by log(1 + f),
  exactly what a slowdown f of that component's CPU time does to its per-unit cost in every cell
  (RLBENCH_SLOW burns f x the stage's CPU time). "Flagged" = one of the component's own metrics worse.
- Real planted runs (RLBENCH_SLOW in the new tree only) are the validation: reported with what they
  flagged.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from rlbench.check import against, ab as check_ab
from rlbench.errors import UserError

SIZES = (0.05, 0.10, 0.20)
# component -> the metric prefixes a slowdown of it moves (per-unit CPU costs of its stage, in every cell)
COMPONENTS = {
    "sampler decode step (rollout)": ("cost:rollout",),
    "gradient pass (update)": ("cost:update",),
    "log-prob forwards (old, ref)": ("cost:old_logprob", "cost:ref_logprob"),
    "optimizer step": ("cost:optimizer_step",),
    "weight sync": ("cost:weight_sync",),
    "reward": ("cost:reward",),
    "queue path (hand-off)": ("cost:handoff",),
    "whole iteration (TPSPD)": ("tpspd:",),
}


def _load(dirs) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """-> (unchanged, planted): [(folder, {metric: paired metric})] of the A/B folders given."""
    unchanged, planted = [], []
    for d in dirs:
        record = json.loads((Path(d) / against.AB_FILE).read_text())
        old, new = against.run_dirs(Path(d))
        entry = (str(d), check_ab.paired_metrics(old, new), record)
        same = record.get("old_commit") and (record.get("new_commit") or "").startswith(record["old_commit"])
        (planted if record.get("planted") else unchanged if same else []).append(entry)
    if len(unchanged) < 3:
        raise UserError(f"--calibrate needs at least 3 unchanged A/B runs (old = new commit, nothing planted), "
                        f"got {len(unchanged)}")
    return unchanged, planted


def _flagged(metrics: dict, shift: dict[str, float] | None = None) -> set[str]:
    """Paired metrics judged worse, with log-ratio shifts added to some."""
    out = set()
    for name, m in metrics.items():
        if not m["log_ratios"]:
            continue
        x = [v + (shift or {}).get(name, 0.0) for v in m["log_ratios"]]
        if check_ab.judge_paired(x, m["direction"], floor=check_ab.floor_of(name))[0] == "worse":
            out.add(name)
    return out


def _sign(direction: str) -> int:
    return 1 if direction == "lower_is_better" else -1  # a slowdown raises a cost, lowers a throughput


def upper_bound(k: int, n: int, conf: float = 0.95) -> float:
    """Exact one-sided upper confidence bound of a rate observed as k of n (Clopper-Pearson), by bisection."""
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        cdf = sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))
        lo, hi = (p, hi) if cdf > 1 - conf else (lo, p)
    return hi


def study(dirs) -> dict:
    unchanged, planted = _load(dirs)
    end_to_end = [(d, check_ab_verdict(d)) for d, _, _ in unchanged]
    detect = {}
    for comp, prefixes in COMPONENTS.items():
        detect[comp] = {}
        for f in SIZES:
            hits = 0
            for _, metrics, _ in unchanged:
                own = [n for n in metrics if n.startswith(prefixes) and metrics[n]["log_ratios"]]
                shift = {n: _sign(metrics[n]["direction"]) * math.log1p(f) for n in own}
                hits += bool(_flagged(metrics, shift) & set(own))
            detect[comp][f] = (hits, len(unchanged))
    walls = [r.get("wall_s") for _, _, r in unchanged + planted if r.get("wall_s")]
    return {"runs": len(unchanged), "end_to_end": end_to_end, "detect": detect,
            "metrics": sorted({n for _, m, _ in unchanged for n in m if m[n]["log_ratios"]}),
            "planted": [(d, r["planted"], sorted(_flagged(m))) for d, m, r in planted],
            "wall_s": (min(walls), max(walls)) if walls else None}


def check_ab_verdict(ab_dir: str) -> tuple[int, list[str]]:
    """(exit code, metrics marked worse) of `rlbench check AB_DIR`, every metric included."""
    old, new = against.run_dirs(Path(ab_dir))
    res = check_ab.compare(old, new, "calibration")
    return res.exit_code, [r.metric for r in res.rows if r.mark == "worse"]


def format_study(res: dict) -> str:
    """The Markdown table bench/baselines/README.md publishes."""
    n = res["runs"]
    alarms = [(d, w) for d, (code, w) in res["end_to_end"] if code]
    lines = [f"Unchanged A/B runs: {n} (each old = new commit, nothing planted; {len(res['metrics'])} paired "
             f"metrics each; z = {check_ab.AB_STATS['z']:g} on the t scale, floor "
             f"{check_ab.AB_STATS['floor']:.0%} per process pair, {check_ab.floor_of('speedup:a/b'):.1%} between "
             f"two cells)", "",
             "| component (metrics a slowdown moves) | " + " | ".join(f"{f:.0%} slower" for f in SIZES) + " |",
             "|---|" + "---|" * len(SIZES)]
    for comp, row in res["detect"].items():
        cells = " | ".join(f"{h}/{t} ({h / t:.0%})" for h, t in row.values())
        lines.append(f"| {comp} ({', '.join(p + ('*' if p.endswith(':') else '') for p in COMPONENTS[comp])}) "
                     f"| {cells} |")
    lines += ["", f"False alarms: {len(alarms)}/{n} unchanged A/B runs failed end to end (every metric judged); "
                  f"95% upper bound {upper_bound(len(alarms), n):.1%}"]
    lines += [f"- false alarm {d}: {', '.join(w)}" for d, w in alarms]
    lines += [f"- real planted run {d}: {p} -> flagged: {', '.join(f) or 'nothing'}" for d, p, f in res["planted"]]
    if res["wall_s"]:
        lines.append(f"A/B run wall time (both trees, setup included): {res['wall_s'][0]:.0f}-{res['wall_s'][1]:.0f} s")
    return "\n".join(lines)
