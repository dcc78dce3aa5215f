"""`rlbench check --calibrate RUN...`: the measured sensitivity and false-alarm rate of `rlbench
check`.

Real runs are expensive (a CI run is ~3 minutes on 2 cores), so most trials reuse the iterations
real unchanged runs recorded:
- held out: each unchanged run in turn is the "current" run; the baseline is calibrated from the
  others (bench/check/stats.py calibrate), as `--update` would write it. No run judges itself.
- pseudo-runs: the held-out run's iterations are resampled with replacement (the same iteration
  indices for every metric, so metrics keep their correlation); B pseudo-runs per held-out run. The
  held-out run keeps its own run-level offset, and resampling adds within-run noise on top, so the
  false-alarm rate is, if anything, overstated.
- planted: a slowdown f of a component adds log(1 + f) to the per-iteration log-ratios of every
  metric whose numerator contains it (subtracts for the denominator): exactly what RLBENCH_SLOW does
  to a stage's recorded duration (bench/planted/slowdown.py). Effects through the critical path on
  TPSPD are not simulated (detection through them is a bonus); the `cell` scenario slows a whole
  iteration.
Runs given with a planted slowdown (RLBENCH_SLOW) are real validation: each is checked against the
baseline calibrated from all unchanged runs.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np

from rlbench.check import stats as check_stats
from rlbench.check.baseline import DEFAULT_TOLERANCES, write_baseline
from rlbench.check.metrics import compute_metrics
from rlbench.check.verdicts import check
from rlbench.core.errors import UserError
from rlbench.core.schedules import name_of
from rlbench.core.schedules.spec import PERIODIC

SIZES = (0.05, 0.10, 0.20)
PSEUDO_RUNS = 40  # per held-out run and scenario; unchanged scenario: twice that
# scenario -> (stage slowed, which cells: schedule or switch that must hold); "iteration" = the
# whole cell
_ASYNC = name_of(PERIODIC)
SCENARIOS = {
    "async trainer update": ("update", {"schedule": _ASYNC}),
    "shared-prompt packing": ("update", {"shared_prompt": True}),
    "queue path (async hand-off)": ("handoff", {"schedule": _ASYNC}),
    "weight sync (async)": ("weight_sync", {"schedule": _ASYNC}),
    # a cell of --ablation ci
    "periodic-async iteration (TPSPD)": ("iteration", {"cell": f"+{_ASYNC}"}),
}


def _hit(switches: dict, cell: str, want: dict) -> bool:
    return all((cell if k == "cell" else switches.get(k)) == v for k, v in want.items())


def effect(metric: str, stage: str, cells: set[str]) -> int:
    """+1 / -1 / 0: how a slowdown of `stage` in `cells` moves the metric's log-ratio (per unit
    log(1+f))."""
    kind, _, rest = metric.partition(":")
    if kind == "stage_cost":
        s, _, pair = rest.partition(":")
        num, _, den = pair.partition("/")
        return (s == stage) * ((num in cells) - (den in cells))
    if kind == "queue_cost":
        return int(stage == "handoff" and bool(set(rest.split(",")) & cells))
    if kind == "speedup" or kind.endswith("_gain"):
        num, _, den = rest.partition("/")
        return (stage == "iteration") * ((den in cells) - (num in cells))
    return 0


def _judge_all(base: dict, cur: dict[str, np.ndarray], stats: dict, meta: dict) -> set[str]:
    """Metrics flagged worse for a current run given as {metric: log_ratios}."""
    flagged = set()
    for name, x in cur.items():
        b = {**meta[name], "value": base[name][0], "se": base[name][1], "run_sd": base[name][2]}
        if check_stats.verdict(b, {"samples": {"log_ratios": list(x)}}, stats)[0] == "worse":
            flagged.add(name)
    return flagged


def _load(run_dirs) -> tuple[list[dict], list[tuple[str, dict]]]:
    unchanged, planted = [], []
    for d in run_dirs:
        m = compute_metrics(Path(d))
        plant = {n: c["planted_slowdown"] for n, c in m["cells"].items()
                 if c.get("planted_slowdown")}
        (planted.append((str(d), m)) if plant else unchanged.append(m))
    if len(unchanged) < 3:
        raise UserError(f"--calibrate needs at least 3 unchanged runs (no RLBENCH_SLOW), got "
                        f"{len(unchanged)}")
    return unchanged, planted


def _paired(run: dict) -> dict[str, np.ndarray]:
    return {n: np.asarray(m["samples"]["log_ratios"]) for n, m in run["metrics"].items()
            if "log_ratios" in (m.get("samples") or {})}


def study(run_dirs, pseudo_runs: int = PSEUDO_RUNS, seed: int = 0) -> dict:
    """-> {"runs", "inflation", "false_alarms": (flagged, trials), "detect": {scenario: {f: (hit,
    trials)}}, "false_alarms_direct", "detect_direct" (the same for the held-out runs as measured,
    not resampled), "targets": {scenario: [metrics]}, "real": [(run, planted, flagged metrics)]}."""
    unchanged, planted = _load(run_dirs)
    rng = np.random.default_rng(seed)
    paired = [_paired(r) for r in unchanged]
    names = sorted(set.intersection(*(set(p) for p in paired)))
    meta = {n: {k: unchanged[0]["metrics"][n][k] for k in ("direction", "kind")} for n in names}
    for n in names:
        meta[n]["tolerance"] = DEFAULT_TOLERANCES[meta[n]["kind"]][0]
    cells = unchanged[0]["cells"]
    targets = {s: {n for n in names
                   if effect(n, stage, {c for c, i in cells.items() if _hit(i["switches"],
                                                                                    c, want)})}
               for s, (stage, want) in SCENARIOS.items()}
    fa, detect = [0, 0], {s: {f: [0, 0] for f in SIZES} for s in SCENARIOS}
    # As measured: each held-out run itself (no resampling), plain or with the slowdown shifted in.
    fa_direct, detect_direct = [0, 0], {s: {f: [0, 0] for f in SIZES} for s in SCENARIOS}
    hits = {s: {c for c, info in cells.items() if _hit(info["switches"], c, want)}
            for s, (_, want) in SCENARIOS.items()}

    def trial(run: dict, base: dict, stats: dict, fas: list, detects: dict | None) -> None:
        """One current run judged unchanged (into fas) and, unless detects is None, with each
        slowdown."""
        fas[0] += bool(_judge_all(base, run, stats, meta))
        fas[1] += 1
        if detects is None:
            return
        for s, (stage, _) in SCENARIOS.items():
            for f in SIZES:
                shifted = {n: x + effect(n, stage, hits[s]) * math.log1p(f) for n, x in run.items()}
                detects[s][f][0] += bool(_judge_all(base, shifted, stats, meta) & targets[s])
                detects[s][f][1] += 1

    for i, cur in enumerate(paired):
        base, c = check_stats.calibrate([{n: p[n] for n in names} for j, p in enumerate(paired)
                                         if j != i])
        stats = {**check_stats.DEFAULTS, "inflation": c}
        n_it = min(len(cur[n]) for n in names)
        trial({n: cur[n] for n in names}, base, stats, fa_direct, detect_direct)
        for b in range(2 * pseudo_runs):
            idx = rng.integers(0, n_it, n_it)
            trial({n: cur[n][idx] for n in names}, base, stats, fa,
                  detect if b < pseudo_runs else None)
    base, c = check_stats.calibrate([{n: p[n] for n in names} for p in paired])
    stats = {**check_stats.DEFAULTS, "inflation": c}
    real = []
    for d, m in planted:
        cur = {n: x for n, x in _paired(m).items() if n in base}
        plant = {n: c["planted_slowdown"] for n, c in m["cells"].items()
                 if c.get("planted_slowdown")}
        real.append((d, plant, sorted(_judge_all(base, cur, stats, meta))))
    return {"runs": len(unchanged), "inflation": c, "false_alarms": tuple(fa),
            "pseudo_runs": pseudo_runs,
            "false_alarms_direct": tuple(fa_direct),
            "detect_direct": {s: {f: tuple(v) for f, v in d.items()}
                              for s, d in detect_direct.items()},
            "held_out": _held_out_checks([d for d in run_dirs
                                          if str(d) not in {p for p, _ in planted}]),
            "detect": {s: {f: tuple(v) for f, v in d.items()} for s, d in detect.items()},
            "targets": {s: sorted(t) for s, t in targets.items()}, "real": real}


def _held_out_checks(dirs) -> list[tuple[str, str]]:
    """End to end, every metric (accuracy and invariants too): each unchanged run checked by `check`
    against a baseline `--update` writes from the other unchanged runs. -> [(run, verdict line)]."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, d in enumerate(dirs):
            path = write_baseline([e for j, e in enumerate(dirs) if j != i],
                                  Path(tmp) / f"b{i}.json")
            out.append((str(d), check(Path(d), path).verdict))
    return out


def format_study(res: dict) -> str:
    """The Markdown table bench/baselines/README.md publishes."""
    lines = [f"Unchanged runs: {res['runs']} (held out in turn; {res['pseudo_runs']} resampled "
             f"pseudo-runs each per planted scenario, twice that unchanged); noise inflation c = "
             f"{res['inflation']:.2f}.", "",
             "| component (metrics it moves) | " + " | ".join(f"{f:.0%} slower" for f in SIZES)
             + " |",
             "|---|" + "---|" * len(SIZES)]
    for s, row in res["detect"].items():
        direct = res["detect_direct"][s]
        cells = " | ".join(f"{h / n:.0%} ({h}/{n}; as measured {direct[f][0]}/{direct[f][1]})" if n
                           else "-"
                           for f, (h, n) in row.items())
        lines.append(f"| {s} ({', '.join(res['targets'][s]) or 'none'}) | {cells} |")
    flagged, trials = res["false_alarms"]
    d_flagged, d_trials = res["false_alarms_direct"]
    lines += ["", f"False alarms (unchanged, any performance metric flagged): resampled "
                  f"{flagged}/{trials} = {flagged / max(trials, 1):.1%}; the held-out runs as "
                  f"measured {d_flagged}/{d_trials}"]
    failed = [(d, v) for d, v in res["held_out"] if not v.startswith("PASS")]
    lines.append(f"Real unchanged runs, each checked end to end against a baseline from the "
                 f"others: {len(failed)}/{len(res['held_out'])} failed"
                 + "".join(f"\n- {d}: {v}" for d, v in failed))
    for d, plant, hits in res["real"]:
        lines.append(f"- real planted run {d}: {plant} -> flagged: {', '.join(hits) or 'nothing'}")
    return "\n".join(lines)
