"""Slow drift over the history of accepted A/B results: change points of each metric's chained series, found
by Apache Otava (e-divisive means with Hunter's split and merge steps; `apache-otava` on PyPI), and the
verdict `rlbench check --record` adds to the per-step gate.

A change of 2% a step passes every step's A/B (its floor is 6%) and the history absorbs it; chained, eight
such steps make a level 17% off the anchor. Otava splits a metric's series where the levels before and
after differ beyond chance (a t-test between the two segments, p below MAX_PVALUE). Chained noise is a random
walk, which that t-test (made for independent points) splits often, so a split counts only when its move is
beyond the metric's per-step floor and the steps since it are beyond their own noise (walk_z > Z_WALK). A
counted regression among the last `last_n` steps is confirmed or cleared by an A/B directly against the
anchor commit recorded after it (kind "anchor": one machine, one run, no chain), which also fails on its own
on a metric it flags worse. Without such an A/B it fails only beyond the line that holds the chance of an
unchanged history failing to FAMILY_ALPHA over every metric and position judged (z_family); short of that it
is suspected and the anchor A/B is due now. Tuning and the measured behaviour: docs/results/ci-gate.md,
'Drift over the history'.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

from rlbench.check import ab as check_ab, history, lifecycle
from rlbench.core.errors import UserError
from rlbench.core.results.metric_table import family

# Otava's significance of a split (its t-test between the segments; the first pass uses 10x this). 0.01, not
# Otava's default 0.001: histories are short (8 steps make 9 points) and the magnitude floor guards the rest.
MAX_PVALUE = 0.01
MIN_POINTS = 4  # fewer levels (anchor included) than this: no split can be significant
LAST_N = 8  # a change point among the last N steps fails the check (while the drift persists: _beyond)
ANCHOR_EVERY = 8  # steps between A/Bs against the anchor commit (`rlbench history` says when one is due)
WINDOW = 50  # Otava's window: longer series are split in windows of this many points
Z_WALK = 3.0  # how many standard deviations of the chain's noise a counted move must exceed (_beyond)
# The chance that a history with nothing changed fails the check on its chain alone, all its metrics and the
# last N positions together (Bonferroni: z_family). A counted change point short of that line is suspected:
# the A/B against the anchor decides it (judge).
FAMILY_ALPHA = 0.01


@dataclass
class ChangePoint:
    metric: str
    position: int  # index in the metric's series (0: the anchor)
    commit: str
    entry: int  # the history entry (0-based line among entries) of the first point after the change
    before: float  # mean level before and after (relative to the anchor)
    after: float
    pvalue: float
    direction: str
    steps_ago: int  # 1: the last step of the series
    counts: bool  # beyond the metric's floor and the chain's noise (_beyond): what a drift verdict judges
    z: float = math.inf  # the move since the change over the chain's noise, in standard deviations (walk_z)

    @property
    def size(self) -> float:
        return self.after / self.before - 1

    @property
    def bad(self) -> bool:
        return (self.size > 0) == (self.direction == "lower_is_better")


@dataclass
class Drift:
    """The drift verdict: the bad change points among the last N steps and what the anchor A/B says."""
    failures: list[tuple[ChangePoint, str]] = field(default_factory=list)  # (change point, confirmation)
    cleared: list[tuple[ChangePoint, str]] = field(default_factory=list)  # not confirmed by an anchor A/B
    suspected: list[tuple[ChangePoint, str]] = field(default_factory=list)  # no anchor A/B yet: one is due now
    exit_code: int = 0


def magnitude_floor(name: str) -> float:
    """The smallest relative move a change point must have: the metric's per-step flag line."""
    return history.floor(name)


def _otava():
    try:
        from otava import analysis  # inside: optional dependency (apache-otava); only --record needs it
    except ImportError:
        raise UserError("drift detection needs Apache Otava: `pip install --no-deps apache-otava==0.8.0` "
                        "(scripts/setup.sh installs it; --no-deps: its pins would downgrade numpy and scipy, "
                        "docs/usage.md 'rlbench history')") from None
    return analysis


def change_points(points: list[history.Point], name: str, direction: str) -> list[ChangePoint]:
    """Otava's change points of one series of levels (ratios to the anchor), each with the mean level of the
    whole series before it and after it: a slow drift is a ramp, which Otava splits into several small
    segments; against everything before, the last split shows the whole move since the drift began."""
    if len(points) < MIN_POINTS:
        return []
    levels = [p.level for p in points]
    found, _ = _otava().compute_change_points(levels, window_len=WINDOW, max_pvalue=MAX_PVALUE, min_magnitude=0.0)
    out = []
    for cp in found:
        k = int(cp.index)
        before, after = sum(levels[:k]) / k, sum(levels[k:]) / (len(levels) - k)
        z = walk_z(points, k)
        out.append(ChangePoint(name, k, points[k].commit, points[k].index, before, after, float(cp.stats.pvalue),
                               direction, len(points) - k, _beyond(z, before, after, name), z))
    return out


def walk_z(points: list[history.Point], k: int) -> float:
    """The steps since the change at k, summed, over their noise: how many standard deviations the last level
    lies from the level before the change (log units, signed). With nothing changed the chained levels are a
    random walk of the A/B runs' independent noise, so the move has the variance of the steps on the last
    point's path from the anchor and not on the earlier point's, and the other way round (Point.var_since:
    sum_{j>=k} v_j along a chain, v_j step j's, history.series: at least its floor / 4; both steps where two
    were recorded from the same old commit, a CI retry or siblings) and, at a fixed k, this is a standard
    normal. Not the mean level before the change as the reference (the move `size` reports): that mean
    carries the walk's own noise before k too, which this variance would leave out."""
    var = points[-1].var_since(points[k - 1])
    move = math.log(points[-1].level / points[k - 1].level)
    return move / math.sqrt(var) if var > 0 else math.copysign(math.inf, move)


def _beyond(z: float, before: float, after: float, name: str) -> bool:
    """A change point counts when its move is beyond the metric's per-step floor, and the last level lies
    beyond the level before the change, the same way, by more than Z_WALK standard deviations of the chain's
    noise (walk_z). Z_WALK is 3, not 1.96: Otava places the change point where the walk's excursion is
    largest, so a single position's interval would understate how far a walk strays."""
    return abs(after / before - 1) > magnitude_floor(name) and abs(z) > Z_WALK and (z > 0) == (after > before)


def z_family(metrics: int, last_n: int = LAST_N) -> float:
    """The walk_z a change point needs to fail the check from the chain alone: one-sided (regressions),
    FAMILY_ALPHA shared by every metric judged and every one of the last N positions (Bonferroni; conservative
    where metrics move together, as the stages of one run do). 57-60 metrics, 8 positions: 4.1."""
    return NormalDist().inv_cdf(1 - FAMILY_ALPHA / (max(metrics, 1) * max(last_n, 1)))


def all_change_points(entries: list[dict], wl: dict) -> list[ChangePoint]:
    """Every change point of every metric of a workload's series, most recent first."""
    out = []
    for name, points in history.series(entries, wl).items():
        direction = next(e["metrics"][name]["direction"] for e in entries if name in e["metrics"])
        out += change_points(points, name, direction)
    return sorted(out, key=lambda c: (c.steps_ago, c.metric))


def anchor_entries(entries: list[dict], wl: dict) -> list[tuple[int, dict]]:
    """The A/Bs of a workload against its current anchor commit, in order."""
    anchor, _ = history.anchor_of(entries, wl)
    return [(i, e) for i, e in history.same_workload(entries, wl) if e["kind"] == "anchor" and e["old_commit"] == anchor]


def steps_since_anchor_ab(entries: list[dict], wl: dict) -> int:
    """Steps recorded after the last anchor A/B (after the anchor itself where none was made)."""
    _, start = history.anchor_of(entries, wl)
    last = max((i for i, _ in anchor_entries(entries, wl)), default=start - 1)
    return sum(1 for i, e in history.same_workload(entries, wl) if e["kind"] == "step" and i > last)


def judged_metrics(entries: list[dict], wl: dict) -> int:
    """How many metrics' series are long enough to split: the family the chain's verdict is shared by."""
    return sum(len(points) >= MIN_POINTS for points in history.series(entries, wl).values())


def judge(entries: list[dict], wl: dict, last_n: int = LAST_N) -> Drift:
    """The bad change points that count among the last `last_n` steps: a failure, confirmed where the latest
    A/B against the anchor made after it flags the metric worse, cleared where it does not (the chain's noise,
    not a change of code). Without such an A/B, a failure only where the chain alone is beyond the noise of
    every metric judged together (z_family): chained noise is a random walk, and across ~60 metrics a walk
    crosses Z_WALK often enough to fail a quarter of unchanged histories (docs/results/ci-gate.md); short of
    that line the change point is suspected and the anchor A/B is due now. And a metric that the latest anchor
    A/B, among the last steps, flags worse without a change point: the drift measured directly, in one run."""
    res = Drift()
    anchors = anchor_entries(entries, wl)
    line = z_family(judged_metrics(entries, wl), last_n)
    for cp in all_change_points(entries, wl):
        if not (cp.bad and cp.counts) or cp.steps_ago > last_n:
            continue
        later = [(i, e) for i, e in anchors if i > cp.entry and cp.metric in e["metrics"]]
        if not later:
            if abs(cp.z) > line:
                res.failures.append((cp, f"{abs(cp.z):.1f} sd of the chain's noise, beyond the {line:.1f} of all "
                                         "metrics together; no A/B against the anchor since"))
            else:
                res.suspected.append((cp, f"{abs(cp.z):.1f} sd of the chain's noise, short of the {line:.1f} of all "
                                          "metrics together: `rlbench check --against anchor --record FILE` decides "
                                          "it on this machine in one run"))
            continue
        i, e = later[-1]
        m = e["metrics"][cp.metric]
        said = f"the anchor A/B (entry {i + 1}) measured {_pct(m['ratio'])}{_interval(m)}"
        (res.failures if m["mark"] == "worse" else res.cleared).append(
            (cp, said + (": confirmed" if m["mark"] == "worse" else ", within its flag line: not confirmed")))
    if anchors and _steps_after(entries, wl, anchors[-1][0]) < last_n:
        i, e = anchors[-1]
        seen = {cp.metric for cp, _ in res.failures + res.cleared}
        for name, m in e["metrics"].items():
            if m["mark"] == "worse" and name not in seen:
                res.failures.append((_direct(name, i, e, m), f"the anchor A/B (entry {i + 1}) measured "
                                                            f"{_pct(m['ratio'])}{_interval(m)}: flagged in one run"))
    res.exit_code = int(bool(res.failures))
    return res


def _steps_after(entries: list[dict], wl: dict, i: int) -> int:
    return sum(1 for j, e in history.same_workload(entries, wl) if e["kind"] == "step" and j > i)


def _direct(name: str, i: int, e: dict, m: dict) -> ChangePoint:
    """What an A/B against the anchor measured, as a change point of the whole series (anchor -> its commit)."""
    return ChangePoint(name, 0, e["new_commit"], i, 1.0, m["ratio"], float("nan"), m["direction"], 0, True)


def _pct(ratio: float) -> str:
    return f"{ratio - 1:+.1%}"


def _interval(m: dict) -> str:
    return f" [{_pct(m['low'])}, {_pct(m['high'])}]" if m.get("low") and m.get("high") else ""


def describe(cp: ChangePoint) -> str:
    """'cost:update +8.9% at 1a2b3c4d5e (p=0.0004, 3 steps ago; level 1.042 -> 1.135 of the anchor)'."""
    if math.isnan(cp.pvalue):  # no change point: what an A/B against the anchor measured (_direct)
        return f"{cp.metric} {cp.size:+.1%} at {cp.commit[:10]} against the anchor"
    return (f"{cp.metric} {cp.size:+.1%} at {cp.commit[:10]} (p={cp.pvalue:.2g}, {cp.steps_ago} step"
            f"{'s' * (cp.steps_ago != 1)} ago; level {cp.before:.3f} -> {cp.after:.3f} of the anchor)")


def format_drift(res: Drift, path, anchor: str | None) -> str:
    """The lines `rlbench check --record` prints after the per-step verdict."""
    if not res.failures and not res.cleared and not res.suspected:
        return f"drift: no change point among the last steps of {path} (anchor {str(anchor)[:10]})"
    lines = []
    if res.failures:
        lines.append(f"DRIFT: {len(res.failures)} change point(s) in {path} against anchor {str(anchor)[:10]}:")
        lines += [f"  {describe(cp)}; {said}" for cp, said in res.failures]
    if res.suspected:
        lines.append(f"drift suspected in {path}, not failing: an A/B against the anchor {str(anchor)[:10]} is due now:")
        lines += [f"  {describe(cp)}; {said}" for cp, said in res.suspected]
    if res.cleared:
        lines.append("drift not confirmed by the anchor A/B (the chain's noise):")
        lines += [f"  {describe(cp)}; {said}" for cp, said in res.cleared]
    return "\n".join(lines)


def format_history(entries: list[dict], path, last_n: int = LAST_N, anchor_every: int = ANCHOR_EVERY) -> str:
    """`rlbench history FILE`: per workload, its anchor and steps, every change point, the anchor A/Bs."""
    if not entries:
        return f"{path}: no entries yet (`rlbench check --record {path}` appends one per passing A/B)"
    out = []
    for wl in workloads(entries):
        anchor, _ = history.anchor_of(entries, wl)
        steps = [e for _, e in history.same_workload(entries, wl) if e["kind"] == "step"]
        out.append(f"workload {wl['config']} --ablation {wl['ablation']}{''.join(' --set ' + s for s in wl['sets'])}: "
                   f"{len(steps)} step(s), anchor {str(anchor)[:10]}")
        cps = all_change_points(entries, wl)
        out.append(f"  change points (Otava, p < {MAX_PVALUE:g}): {len(cps) or 'none'}")
        out += [f"    {label(cp)} {describe(cp)}" for cp in cps]
        for i, e in anchor_entries(entries, wl):
            worse = ", ".join(f"{n} {_pct(m['ratio'])}" for n, m in e["metrics"].items() if m["mark"] == "worse")
            out.append(f"  anchor A/B entry {i + 1} ({e['date'][:10]}, {e['new_commit'][:10]} against "
                       f"{e['old_commit'][:10]}): {worse or 'nothing flagged'}")
        due = steps_since_anchor_ab(entries, wl)
        if anchor and due >= anchor_every:
            out.append(f"  an A/B against the anchor is due ({due} steps since the last): "
                       f"rlbench check --against anchor --record {path}")
    return "\n".join(out)


def label(cp: ChangePoint) -> str:
    """regression / improvement where the move counts (beyond the floor and the chain's noise), else small."""
    return ("REGRESSION" if cp.bad else "improvement") if cp.counts else "(within the floor or the noise)"


def workloads(entries: list[dict]) -> list[dict]:
    """The workloads of a history, each once, in order of first entry."""
    return list({f"{e['workload']['config']}|{e['workload']['ablation']}|{'|'.join(e['workload']['sets'])}":
                 e["workload"] for e in entries}.values())
