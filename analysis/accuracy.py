"""Time-to-accuracy: does a schedule learn the same thing, and how soon (docs/metrics.md, 'Time to
accuracy'; A-3PO's table).

For every cell and seed, an accuracy curve: greedy pass@1 (strict GSM8K rule, and in any format) at
each evaluation, against
  - training wall time: the summed windows of the iterations before the evaluation (each iteration's
    TPSPD window, docs/metrics.md: nothing between iterations, no evaluation, no other cell's turn;
    the same clock for every schedule, whether iterations overlap or not);
  - trained samples: samples of the iterations before the evaluation.
Per cell (over its seeds): final accuracy with a 95% interval (a t-interval of the mean over seeds;
with one seed, the Wilson score interval over the eval problems), and the time and samples to reach
a target accuracy. The target is per seed: the accuracy the reference cell (the first: sync) of that
seed gains by its end, TARGET_SHARE of the way from its first evaluation to its last, so it is a
level the reference reaches and the question is who reaches it sooner (seeds start from different
warm starts, so one target from medians could lie at or below a seed's start). A seed whose
reference did not improve has no target. A crossing is interpolated linearly between the last
evaluation below the target and the first at or above it; a seed that never reaches its target
counts as not reached.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from rlbench.analysis.data import CellData, RunData
from rlbench.core.results import schema
from rlbench.core.stats import student_quantile, wilson

TARGET_SHARE = 0.8


@dataclass
class Curve:
    """One cell of one seed: a point per evaluation."""

    cell: str
    seed: int | None
    iteration: list[int] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    any_format: list[float | None] = field(default_factory=list)
    # data.split fact: seen-fact pass@1, else None
    seen: list[float | None] = field(default_factory=list)
    n_eval: int | None = None


def curve(c: CellData) -> Curve:
    """Accuracy curve of one cell (name and seed from `cell@seedN`, else the config's run.seed)."""
    base, seed = schema.split_seeded(c.name)
    if seed is None:
        seed = c.config.run.seed
    out = Curve(base, seed)
    by_iter = {it["iteration"]: it for it in c.iterations}
    for ev in c.result.get("evals") or []:
        k = ev["iteration"]
        if k and (k - 1) not in by_iter:
            continue  # an evaluation after an iteration that was not recorded
        out.iteration.append(k)
        out.wall_s.append(sum(it["wall_s"] for i, it in by_iter.items() if i < k))
        out.samples.append(sum(it["num_samples"] for i, it in by_iter.items() if i < k))
        out.accuracy.append(ev["accuracy"])
        out.any_format.append(ev.get("accuracy_any_format"))
        out.seen.append(ev.get("accuracy_seen"))
        out.n_eval = ev.get("n") or out.n_eval
    return out


def curves(run: RunData) -> dict[str, list[Curve]]:
    """cell name (without seed) -> its curves, one per seed, in run order."""
    out: dict[str, list[Curve]] = defaultdict(list)
    for c in run.cells:
        cv = curve(c)
        if cv.accuracy:
            out[cv.cell].append(cv)
    return dict(out)


def interval(values: list[float], n_eval: int | None) -> tuple[float, float, float, str]:
    """(mean, low, high, method) of final accuracies: 95% t-interval over seeds, or Wilson for
    one."""
    m = statistics.fmean(values)
    if len(values) >= 2:
        _, lo, hi = t_interval(values)
        return m, max(0.0, lo), min(1.0, hi), f"t-interval over {len(values)} seeds"
    if not n_eval:
        return m, m, m, "one seed, eval size unknown"
    low, high = wilson(round(m * n_eval), n_eval, 0.95)
    return m, low, high, f"Wilson, {n_eval} eval problems"


def t_interval(values: list[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): the 95% t-interval of the mean over seeds, not clipped (gains and times
    can take any sign and size); None with fewer than two values."""
    if len(values) < 2:
        return None
    m = statistics.fmean(values)
    half = student_quantile(0.975,
                            len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - half, m + half


def target_accuracy(all_curves: dict[str, list[Curve]], reference: str) -> dict:
    """{seed: target}: TARGET_SHARE of the gain of that seed's reference curve (first to last
    evaluation); seeds whose reference did not improve are left out."""
    ref = all_curves.get(reference) or next(iter(all_curves.values()), [])
    return {c.seed: c.accuracy[0] + TARGET_SHARE * (c.accuracy[-1] - c.accuracy[0])
            for c in ref if c.accuracy[-1] > c.accuracy[0]}


def typical_target(targets: dict) -> float | None:
    """The median of the per-seed targets (what a table or plot shows as one line); None without
    any."""
    return statistics.median(targets.values()) if targets else None


def crossing(cv: Curve, target: float, axis: str = "wall_s") -> float | None:
    """Where the curve first reaches target on axis (wall_s or samples), interpolated; None if
    never."""
    xs = getattr(cv, axis)
    for i, a in enumerate(cv.accuracy):
        if a >= target:
            if i == 0:
                return float(xs[0])
            a0, x0 = cv.accuracy[i - 1], xs[i - 1]
            return x0 + (target - a0) / (a - a0) * (xs[i] - x0)
    return None


def mean_curve(cvs: list[Curve], axis: str = "wall_s") -> tuple[list[float], list[float]] | None:
    """The seeds' mean curve, evaluation by evaluation: (mean of axis (wall_s or samples), mean
    accuracy); None unless there are several seeds with the same evaluations."""
    if len(cvs) < 2 or len({len(cv.accuracy) for cv in cvs}) != 1:
        return None
    xs = [statistics.fmean(p) for p in zip(*(getattr(cv, axis) for cv in cvs))]
    return xs, [statistics.fmean(p) for p in zip(*(cv.accuracy for cv in cvs))]
