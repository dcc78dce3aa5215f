"""`rlbench check --calibrate AB_DIR...`: the measured power of `rlbench check --against` from real
A/B runs.

- False alarms: every unchanged A/B run (old and new the same commit, nothing planted) judged end to
  end as `check --against` judges it; each is an independent run, nothing resampled. The rate comes
  with its exact (Clopper-Pearson) one-sided 95% upper bound.
- Detection, as measured: each unchanged run again, with a component's metrics shifted by log(1 +
  f), exactly what a slowdown f of that component's CPU time does to its per-unit cost in every cell
  (RLBENCH_SLOW burns f x the stage's CPU time). "Flagged" = one of the component's own metrics
  worse.
- Confirmed (`--confirm`, bench/check/confirm.py): a paired metric fails only when the first A/B run
  flags it and a second with fresh processes flags it again at the confirming flag line
  (CONFIRM_STATS); every ordered pair of distinct unchanged runs stands for a run and its
  confirmation (pairs share runs, so the pair counts are not independent trials: they estimate the
  rate).
- One cell: a slowdown of one cell's work alone (bench/check/one_cell.py), detected only through the
  metrics it moves (that cell's TPSPD, its samples of the pooled costs, the ratios it is in).
- The metrics outside the iterations (one value per tree): their measured noise and the floor it
  suggests (bench/check/lifecycle_noise.py).
- Real planted runs (RLBENCH_SLOW in the new tree only) are the validation: reported with what they
  flagged; runs planted with work:F@CELL, how many flagged a metric of that cell.
"""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

from rlbench.check import against, ab as check_ab, lifecycle, lifecycle_noise, one_cell
from rlbench.check.metrics import read_cells
from rlbench.core.errors import UserError
from rlbench.core.results.metric_table import family

SIZES = (0.05, 0.10, 0.20)
# component -> the metric prefixes a slowdown of it moves (per-unit CPU costs of its stage, in every
# cell)
COMPONENTS = {
    "sampler decode step (rollout)": ("cost:rollout",),
    "gradient pass (update)": ("cost:update",),
    "log-prob forwards (old, ref)": ("cost:old_logprob", "cost:ref_logprob"),
    "optimizer step": ("cost:optimizer_step",),
    "weight sync": ("cost:weight_sync",),
    "reward": ("cost:reward",),
    "queue path (hand-off)": ("cost:handoff",),
    "every cell's iteration at once (TPSPD)": ("tpspd:",),  # one cell alone: the one-cell table
}


def _load(dirs) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """-> (unchanged, planted): [(folder, {metric: paired metric})] of the A/B folders given."""
    unchanged, planted = [], []
    for d in dirs:
        record = json.loads((Path(d) / against.AB_FILE).read_text())
        old, new = against.run_dirs(Path(d))
        entry = (str(d), check_ab.paired_metrics(old, new), record)
        same = record.get("old_commit") and (record.get("new_commit")
                                             or "").startswith(record["old_commit"])
        (planted if record.get("planted") else unchanged if same else []).append(entry)
    if len(unchanged) < 2:  # two give one ordered pair each way; more make the rates worth reading
        raise UserError(f"--calibrate needs at least 2 unchanged A/B runs (old = new commit, "
                        f"nothing planted), got {len(unchanged)}")
    return unchanged, planted


def _flagged(metrics: dict, shift: dict | None = None, stats: dict = check_ab.AB_STATS) -> set[str]:
    """Paired metrics judged worse (by `stats`: the first run's flag line, or the confirming run's),
    with log-ratio shifts added to some: {metric: one shift for every sample, or a list, one per
    sample}."""
    out = set()
    for name, m in metrics.items():
        if not m["log_ratios"]:
            continue
        add = (shift or {}).get(name, 0.0)
        x = [v + (add[i] if isinstance(add, list) else add) for i, v in enumerate(m["log_ratios"])]
        if check_ab.judge_metric(name, m, x, stats)[0] == "worse":
            out.add(name)
    return out


def _sign(direction: str) -> int:
    # a slowdown raises a cost, lowers a throughput
    return 1 if direction == "lower_is_better" else -1


def upper_bound(k: int, n: int, conf: float = 0.95) -> float:
    """Exact one-sided upper confidence bound of a rate observed as k of n (Clopper-Pearson), by
    bisection."""
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        cdf = sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))
        lo, hi = (p, hi) if cdf > 1 - conf else (lo, p)
    return hi


def _unplanted(ab_dir: str, metrics: dict) -> dict:
    """A planted run's metrics outside the iterations, less those of the cells a slowdown was
    planted in (their warm-up iterations and CPU moved): the others are as unchanged as an unchanged
    run's."""
    _, new = against.run_dirs(Path(ab_dir))
    planted = {c for c, res in read_cells(new)[1].items() if res.get("planted_slowdown")}
    return {n: m for n, m in metrics.items()
            if family(n) in lifecycle.FLOORS and n.split(":")[1] not in planted}


def _rates(unchanged: list, shift_of) -> tuple[tuple[int, int], tuple[int, int]]:
    """((runs flagged, runs), (ordered pairs flagged by both, pairs)) with a planted change shifted
    into each unchanged run. shift_of(metrics) -> ({metric: shift}, the metrics the change moves): a
    run detects it when one of those is flagged worse; a pair when the second run flags one of them
    again (confirming line)."""
    hits, again = [], []
    for _, metrics, _ in unchanged:
        shift, moved = shift_of(metrics)
        hits.append(_flagged(metrics, shift) & moved)
        again.append(_flagged(metrics, shift, check_ab.CONFIRM_STATS) & moved)
    pairs = list(itertools.permutations(range(len(unchanged)), 2))
    return (sum(map(bool, hits)), len(unchanged)), (sum(bool(hits[i] & again[j]) for i, j in pairs),
                                                    len(pairs))


def _component(prefixes: tuple, f: float):
    """A slowdown f of a component every cell runs: its metrics' log-ratios move by log(1 + f)."""
    def shift_of(metrics: dict):
        own = {n for n in metrics if n.startswith(prefixes) and metrics[n]["log_ratios"]}
        return {n: _sign(metrics[n]["direction"]) * math.log1p(f) for n in own}, own
    return shift_of


def study(dirs) -> dict:
    unchanged, planted = _load(dirs)
    end_to_end = [(d, check_ab_verdict(d)) for d, _, _ in unchanged]
    detect, confirmed = {}, {}
    for comp, prefixes in COMPONENTS.items():
        both = {f: _rates(unchanged, _component(prefixes, f)) for f in SIZES}
        detect[comp] = {f: b[0] for f, b in both.items()}
        confirmed[comp] = {f: b[1] for f, b in both.items()}
    cells = one_cell.cells_of(unchanged[0][1])
    single = {c: {f: _rates(unchanged, one_cell.shift(c, f)) for f in SIZES} for c in cells}
    runs = [(d, _flagged(m), _flagged(m, stats=check_ab.CONFIRM_STATS), set(w))
            for (d, m, _), (_, (_, w)) in zip(unchanged, end_to_end)]
    # a run and its confirmation: fails when the first fails on anything but paired metrics, or both
    # flag one
    confirmed_alarms = [(a[0], b[0], sorted((a[3] - a[1]) or (a[1] & b[2])))
                        for a, b in itertools.permutations(runs, 2) if (a[3] - a[1])
                               or (a[1] & b[2])]
    walls = [r.get("wall_s") for _, _, r in unchanged + planted if r.get("wall_s")]
    return {"runs": len(unchanged), "end_to_end": end_to_end, "detect": detect,
            "confirmed": confirmed,
            "one_cell": single, "noise": lifecycle_noise.noise([m for _, m, _ in unchanged]
                                                               + [_unplanted(d, m)
                                                                  for d, m, _ in planted]),
            "confirmed_alarms": confirmed_alarms,
            "ordered_pairs": len(unchanged) * (len(unchanged) - 1),
            "metrics": sorted({n for _, m, _ in unchanged for n in m if m[n]["log_ratios"]}),
            "planted": [(d, r["planted"], sorted(_flagged(m)),
                         one_cell.planted_hit(r["planted"], m, _flagged(m)))
                        for d, m, r in planted],
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
    lines = [f"Unchanged A/B runs: {n} (each old = new commit, nothing planted; "
             f"{len(res['metrics'])} paired metrics each; z = {check_ab.AB_STATS['z']:g} on the t "
             f"scale, floor {check_ab.AB_STATS['floor']:.0%} per process pair, "
             f"{check_ab.floor_of('speedup:a/b'):.1%} between two cells). Each cell: flagged by "
             f"one run; then confirmed: flagged by the first run of an ordered pair and again by "
             f"the second at the confirming line (t of z = {check_ab.CONFIRM_STATS['z']:g}, "
             "same floor)", "",
             "| component (metrics a slowdown moves) | "
             + " | ".join(f"{f:.0%} slower" for f in SIZES) + " |",
             "|---|" + "---|" * len(SIZES)]
    for comp, row in res["detect"].items():
        both = res["confirmed"][comp]
        cells = " | ".join(f"{h}/{t} ({h / t:.0%}); confirmed {c}/{p} ({c / p:.0%})"
                           for (h, t), (c, p) in zip(row.values(), both.values()))
        parts = ", ".join(p + ("*" if p.endswith(":") else "") for p in COMPONENTS[comp])
        lines.append(f"| {comp} ({parts}) | {cells} |")
    lines += ["", f"False alarms: {len(alarms)}/{n} unchanged A/B runs failed end to end (every "
                  f"metric judged); 95% upper bound {upper_bound(len(alarms), n):.1%}"]
    lines += [f"- false alarm {d}: {', '.join(w)}" for d, w in alarms]
    k, pairs = len(res["confirmed_alarms"]), res["ordered_pairs"]
    lines.append(f"Confirmed (--confirm: a run fails on what a second run flags too): {k}/{pairs} "
                 f"ordered pairs of distinct unchanged runs ({k / pairs:.1%})" if pairs else "")
    lines += [f"- confirmed false alarm {a} then {b}: {', '.join(w)}"
              for a, b, w in res["confirmed_alarms"][:10]]
    lines += ["", *_format_one_cell(res), "", *lifecycle_noise.format_noise(res["noise"]), ""]
    lines += [f"- real planted run {d}: {p} -> flagged: {', '.join(f) or 'nothing'}"
              for d, p, f, _ in res["planted"]]
    lines += _format_planted_cells(res["planted"])
    if res["wall_s"]:
        lines.append(f"A/B run wall time (both trees, setup included): "
                     f"{res['wall_s'][0]:.0f}-{res['wall_s'][1]:.0f} s")
    return "\n".join(lines)


def _format_one_cell(res: dict) -> list[str]:
    """The one-cell table: every working stage of one cell slower (RLBENCH_SLOW=work:F@CELL),
    shifted in."""
    lines = ["One cell's work slower (work:F@CELL: its TPSPD, its samples of the pooled stage "
             "costs and the between-cell ratios it is in move; bench/check/one_cell.py): runs "
             "flagging a metric it moves, then confirmed pairs", "",
             "| cell slowed | " + " | ".join(f"{f:.0%} slower" for f in SIZES) + " |",
             "|---|" + "---|" * len(SIZES)]
    for cell, row in res["one_cell"].items():
        lines.append(f"| {cell} | "
                     + " | ".join(f"{h}/{t} ({h / t:.0%}); confirmed {c}/{p} ({c / p:.0%})"
                                                 for (h, t), (c, p) in row.values()) + " |")
    return lines


def _format_planted_cells(planted: list) -> list[str]:
    """Real runs planted with work:F@CELL, grouped by spec: how many flagged a metric of that
    cell."""
    groups: dict[str, list[bool]] = {}
    for _, p, _, hit in planted:
        if hit is not None:
            groups.setdefault(p.get("RLBENCH_SLOW"), []).append(hit)
    return [f"Real planted runs RLBENCH_SLOW={spec}: {sum(h)}/{len(h)} flagged a metric of that "
            f"cell"
            for spec, h in groups.items()]
