"""Slow drift over the history of accepted A/B results, and the verdict `rlbench check --record` and
`rlbench history` add to the per-step gate.

A change of 2% a step passes every step's A/B (its floor is 6%) and the history absorbs it; chained,
eight such steps make a level 17% off the anchor. The verdict (`judge`) fits a ramp to each metric's
levels since every one of the last `last_n` commits (bench/check/ramp.py: least squares weighted by
the levels' exact covariance, so landings recorded against an ACCEPTED that stays, siblings, and
steps chained one after the other are read alike) and counts a regression whose rise is beyond the
metric's per-step floor. Against the noise of every metric and start tried together (Bonferroni,
`z_family`): beyond SUSPECT_ALPHA's line a drift is *suspected* and printed (the A/B against the
anchor is due now); beyond FAMILY_ALPHA's it fails, unless an A/B directly against the anchor (kind
"anchor": one machine, one run, no chain) recorded after its start clears it; that A/B confirms it
where it flags the metric worse, and fails by itself on a metric it flags worse. Apache Otava's
change points (e-divisive means with Hunter's split and merge; `apache-otava`) of each series are
listed below the verdict as its detail. Tuning and the measured behaviour: docs/results/ci-gate.md,
'Drift over the history', and scripts/drift_study.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

from rlbench.check import ab as check_ab, history, lifecycle, ramp
from rlbench.core.errors import UserError
from rlbench.core.results.metric_table import family

# Otava's significance of a split (its t-test between the segments; the first pass uses 10x this).
# 0.01, not Otava's default 0.001: histories are short (8 steps make 9 points) and the magnitude
# floor guards the rest.
MAX_PVALUE = 0.01
MIN_POINTS = 4  # fewer levels (anchor included) than this: no split can be significant
# a change point among the last N steps fails the check (while the drift persists: _beyond)
LAST_N = 8
# steps between A/Bs against the anchor commit (`rlbench history` says when one is due)
ANCHOR_EVERY = 8
WINDOW = 50  # Otava's window: longer series are split in windows of this many points
# how many standard deviations of the chain's noise a counted move must exceed (_beyond)
Z_WALK = 3.0
# The chance that a history with nothing changed fails the check on its chain alone, all its metrics
# and the last N starts together (Bonferroni: z_family). A drift short of that line and beyond
# SUSPECT_ALPHA's is suspected: printed, and the A/B against the anchor decides it (judge).
FAMILY_ALPHA = 0.01
SUSPECT_ALPHA = 0.05


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
    # beyond the metric's floor and the chain's noise (_beyond): what a drift verdict judges
    counts: bool
    # the move since the change over the chain's noise, in standard deviations (walk_z)
    z: float = math.inf
    since: str = ""  # a ramp's: the commit before its first point (the drift is "since" it)
    slope: float | None = None  # a ramp's rise a step (log units); None: one of Otava's splits

    @property
    def size(self) -> float:
        return self.after / self.before - 1

    @property
    def bad(self) -> bool:
        return (self.size > 0) == (self.direction == "lower_is_better")


@dataclass
class Drift:
    """The drift verdict: the bad change points among the last N steps and what the anchor A/B
    says."""
    # (change point, confirmation)
    failures: list[tuple[ChangePoint, str]] = field(default_factory=list)
    # not confirmed by an anchor A/B
    cleared: list[tuple[ChangePoint, str]] = field(default_factory=list)
    # no anchor A/B yet: one is due now
    suspected: list[tuple[ChangePoint, str]] = field(default_factory=list)
    exit_code: int = 0


def magnitude_floor(name: str) -> float:
    """The smallest relative move a change point must have: the metric's per-step flag line."""
    return history.floor(name)


def _otava():
    try:
        # inside: optional dependency (apache-otava); only --record needs it
        from otava import analysis
    except ImportError:
        raise UserError("drift detection needs Apache Otava: `pip install --no-deps "
                        "apache-otava==0.8.0` (scripts/setup.sh installs it; --no-deps: its pins "
                        "would downgrade numpy and scipy, docs/usage.md 'rlbench history')"
                        ) from None
    return analysis


def change_points(points: list[history.Point], name: str, direction: str) -> list[ChangePoint]:
    """Otava's change points of one series of levels (ratios to the anchor), each with the mean
    level of the whole series before it and after it: a slow drift is a ramp, which Otava splits
    into several small segments; against everything before, the last split shows the whole move
    since the drift began."""
    if len(points) < MIN_POINTS:
        return []
    levels = [p.level for p in points]
    found, _ = _otava().compute_change_points(levels, window_len=WINDOW, max_pvalue=MAX_PVALUE,
                                              min_magnitude=0.0)
    out = []
    for cp in found:
        k = int(cp.index)
        before, after = sum(levels[:k]) / k, sum(levels[k:]) / (len(levels) - k)
        z = walk_z(points, k)
        out.append(ChangePoint(name, k, points[k].commit, points[k].index, before, after,
                               float(cp.stats.pvalue),
                               direction, len(points) - k, _beyond(z, before, after, name), z))
    return out


def walk_z(points: list[history.Point], k: int) -> float:
    """The steps since the change at k, summed, over their noise: how many standard deviations the
    last level lies from the level before the change (log units, signed). With nothing changed the
    chained levels are a random walk of the A/B runs' independent noise, so the move has the
    variance of the steps on the last point's path from the anchor and not on the earlier point's,
    and the other way round (Point.var_since: sum_{j>=k} v_j along a chain, v_j step j's,
    history.series: at least its floor / 4; both steps where two were recorded from the same old
    commit, a CI retry or siblings) and, at a fixed k, this is a standard normal. Not the mean level
    before the change as the reference (the move `size` reports): that mean carries the walk's own
    noise before k too, which this variance would leave out."""
    var = points[-1].var_since(points[k - 1])
    move = math.log(points[-1].level / points[k - 1].level)
    return move / math.sqrt(var) if var > 0 else math.copysign(math.inf, move)


def _beyond(z: float, before: float, after: float, name: str) -> bool:
    """A change point counts when its move is beyond the metric's per-step floor, and the last level
    lies beyond the level before the change, the same way, by more than Z_WALK standard deviations
    of the chain's noise (walk_z). Z_WALK is 3, not 1.96: Otava places the change point where the
    walk's excursion is largest, so a single position's interval would understate how far a walk
    strays."""
    return abs(after / before
               - 1) > magnitude_floor(name) and abs(z) > Z_WALK and (z > 0) == (after > before)


def z_family(metrics: int, last_n: int = LAST_N, alpha: float | None = None) -> float:
    """The z a drift needs to fail the check from the chain alone (alpha FAMILY_ALPHA) or to be
    suspected (SUSPECT_ALPHA): one-sided (regressions), shared by every metric judged and every one
    of the last N starts (Bonferroni; conservative where metrics move together, as the stages of one
    run do). 60 metrics, 8 starts: 4.1 to fail, 3.7 to be suspected."""
    return NormalDist().inv_cdf(1 - (FAMILY_ALPHA if alpha is None else alpha) / (max(metrics,
                                                                                      1)
                                                                                  * max(last_n, 1)))


def drifts(entries: list[dict], wl: dict, last_n: int = LAST_N) -> list[ChangePoint]:
    """Per metric, its steepest ramp in the regression's direction among starts at the last `last_n`
    commits (bench/check/ramp.py), as a ChangePoint: counts where its rise is beyond the metric's
    floor."""
    out = []
    for name, points in history.series(entries, wl).items():
        direction = next(e["metrics"][name]["direction"] for e in entries if name in e["metrics"])
        worse = 1 if direction == "lower_is_better" else -1
        found = [r for r in ramp.ramps(points, last_n) if r.slope * worse > 0]
        if len(points) < MIN_POINTS or not found:
            continue
        r = max(found, key=lambda r: abs(r.z))
        before = points[r.start - 1].level
        after = before * math.exp(r.rise)
        out.append(ChangePoint(name, r.start, points[r.start].commit, points[r.start].index, before,
                               after,
                               NormalDist().cdf(-abs(r.z)), direction, len(points) - r.start,
                               abs(after / before - 1) > magnitude_floor(name), r.z * worse,
                               since=points[r.start - 1].commit, slope=r.slope))
    return sorted(out, key=lambda c: -c.z)


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
    return [(i, e) for i, e in history.same_workload(entries,
                                                     wl) if e["kind"] == "anchor"
                          and e["old_commit"] == anchor]


def steps_since_anchor_ab(entries: list[dict], wl: dict) -> int:
    """Steps recorded after the last anchor A/B (after the anchor itself where none was made)."""
    _, start = history.anchor_of(entries, wl)
    last = max((i for i, _ in anchor_entries(entries, wl)), default=start - 1)
    return sum(1 for i, e in history.same_workload(entries, wl) if e["kind"] == "step" and i > last)


def judged_metrics(entries: list[dict], wl: dict) -> int:
    """How many metrics' series are long enough to split: the family the chain's verdict is shared
    by."""
    return sum(len(points) >= MIN_POINTS for points in history.series(entries, wl).values())


def judge(entries: list[dict], wl: dict, last_n: int = LAST_N) -> Drift:
    """The regressions (drifts) that count among the last `last_n` starts: a failure where the chain
    alone is beyond the noise of every metric and start judged together (z_family at FAMILY_ALPHA),
    or where the latest A/B against the anchor made after the drift's start flags the metric worse;
    cleared where that A/B does not; suspected where, with no such A/B, the chain lies between
    SUSPECT_ALPHA's line and FAMILY_ALPHA's. And a metric that the latest anchor A/B, among the last
    steps, flags worse: the drift measured directly."""
    res = Drift()
    anchors = anchor_entries(entries, wl)
    metrics = judged_metrics(entries, wl)
    fail, suspect = z_family(metrics, last_n), z_family(metrics, last_n, SUSPECT_ALPHA)
    for cp in drifts(entries, wl, last_n):
        if not cp.counts or cp.z <= suspect:
            continue
        later = [(i, e) for i, e in anchors if i > cp.entry and cp.metric in e["metrics"]]
        if not later:
            line = f"{cp.z:.1f} sd of the chain's noise"
            if cp.z > fail:
                res.failures.append((cp, f"{line}, beyond the {fail:.1f} of all metrics together; "
                                         "no A/B against the anchor since"))
            else:
                res.suspected.append((cp, f"{line}, short of the {fail:.1f} that fails: `rlbench "
                                          "check --against anchor --record FILE` decides it on "
                                          "this machine in one run"))
            continue
        i, e = later[-1]
        m = e["metrics"][cp.metric]
        said = f"the anchor A/B (entry {i + 1}) measured {_pct(m['ratio'])}{_interval(m)}"
        (res.failures if m["mark"] == "worse" else res.cleared).append(
            (cp, said + (": confirmed" if m["mark"] == "worse"
                         else ", within its flag line: not confirmed")))
    if anchors and _steps_after(entries, wl, anchors[-1][0]) < last_n:
        i, e = anchors[-1]
        seen = {cp.metric for cp, _ in res.failures + res.cleared}
        for name, m in e["metrics"].items():
            if m["mark"] == "worse" and name not in seen:
                res.failures.append((_direct(name, i, e, m),
                                     f"the anchor A/B (entry {i + 1}) measured "
                                                            f"{_pct(m['ratio'])}{_interval(m)}: "
                                                            f"flagged in one run"))
    res.exit_code = int(bool(res.failures))
    return res


def _steps_after(entries: list[dict], wl: dict, i: int) -> int:
    return sum(1 for j, e in history.same_workload(entries, wl) if e["kind"] == "step" and j > i)


def _direct(name: str, i: int, e: dict, m: dict) -> ChangePoint:
    """What an A/B against the anchor measured, as a change point of the whole series (anchor -> its
    commit)."""
    return ChangePoint(name, 0, e["new_commit"], i, 1.0, m["ratio"], float("nan"), m["direction"],
                       0, True)


def _pct(ratio: float) -> str:
    return f"{ratio - 1:+.1%}"


def _interval(m: dict) -> str:
    return f" [{_pct(m['low'])}, {_pct(m['high'])}]" if m.get("low") and m.get("high") else ""


def workloads(entries: list[dict]) -> list[dict]:
    """The workloads of a history, each once, in order of first entry."""
    def key(wl: dict) -> str:
        return f"{wl['config']}|{wl['ablation']}|{'|'.join(wl['sets'])}"

    return list({key(e["workload"]): e["workload"] for e in entries}.values())
