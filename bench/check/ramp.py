"""A creeping drift in a metric's series of levels (bench/check/history.py series): the
least-squares ramp of the log level, starting after a commit, weighted by the series' own
covariance, and how many standard deviations its slope lies from zero.

The levels are not independent. Each step's ratio is one A/B run's measurement with its own variance
v_j (history._step_var), and a commit's log level is the sum of the steps on its path from the
anchor (Point.path): along a chain (each step against the one before) the levels are a random walk;
while ACCEPTED stays, the landings are siblings (each against the anchor itself) and their levels
independent. The covariance of two levels is the variance of the steps their paths share, sum_{j in
both} v_j, exactly, so one generalised least-squares fit serves both ways of recording: on a chain
it is the mean of the steps since the start, on siblings the fit of their levels through the anchor.

For a start k (the drift's first commit is point k, the commit before it point k - 1), the ramp is
x_i = max(0, i - k + 1); slope b = x'C^-1 y / x'C^-1 x, its standard error 1 / sqrt(x'C^-1 x), z = b
/ se, a standard normal when nothing changed (and the variances are right: each step's is at least
what the history's own steps scatter by). The move it reports is the ramp's rise over the points
since k. Every start among the last `positions` points is tried: the family the verdict's line holds
its level over is the metrics times those positions (bench/check/drift.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Ramp:
    start: int  # index of the drift's first point in the series (the commit before it: start - 1)
    slope: float  # log units a step
    z: float  # slope over its standard error
    rise: float  # slope x the points since the start: the move it fitted (log units)


def covariance(points: list) -> np.ndarray:
    """C_ij = the variance of the steps on both points' paths (points: the series less the
    anchor)."""
    ids = sorted({j for p in points for j in p.path})
    var = np.array([next(p.path[j] for p in points if j in p.path) for j in ids])
    member = np.array([[j in p.path for j in ids] for p in points], dtype=float)  # [points, steps]
    return (member * var) @ member.T


def ramps(points: list, positions: int) -> list[Ramp]:
    """The ramp at every start among the last `positions` points of a series (points[0]: the anchor,
    level 1; points without a step of their own, a metric's first commit at level 1, carry no
    information and are left out of the fit)."""
    idx = [i for i, p in enumerate(points) if i > 0 and p.path]
    if not idx:
        return []
    pts = [points[i] for i in idx]
    y = np.log([p.level for p in pts])
    prec = np.linalg.pinv(covariance(pts))
    out = []
    for k in range(max(1, len(points) - positions), len(points)):
        x = np.array([max(0, i - k + 1) for i in idx], dtype=float)
        info = float(x @ prec @ x)
        if info <= 0:
            continue
        slope = float(x @ prec @ y) / info
        out.append(Ramp(k, slope, slope * math.sqrt(info), slope * (len(points) - k)))
    return out
