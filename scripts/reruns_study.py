"""How often `rlbench compare RUN RUN RUN` says something that is not there: runs of one config with no true
difference between the cells (and none between the runs), k runs of n iterations each, judged by the rule of
analysis/reruns.py (after: Welch's test of equal means, the Hartung-Knapp pooled interval) and by the rule
it replaced (before: Cochran's Q against chi-squared, the pooled interval with the normal quantile).

Each run's paired log-ratios are a stationary AR(1) series (lag-1 correlation phi, standard deviation --sd, 3%
by default) around log(true ratio); each run's centre, error and degrees of freedom are the verdict's own
(core/ratio_interval.py log_estimate). A false pooled word is "wins" or "loses" at a true ratio of 1; a
false "the runs differ" is the test's p below 5% with no offset between the runs; the power is the pooled
"wins" at a true ratio of --effect. Both rules take each run's centre and error as the verdicts of their
time computed them (before: 20% of every n trimmed, no interval below one degree of freedom). Prints a markdown table (docs/results/reruns.md).

    .venv/bin/python scripts/reruns_study.py --reps 4000 --seed 1
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from rlbench.analysis import reruns
from rlbench.analysis.intervals import Ratio
from rlbench.core.ratio_interval import inflation, log_estimate, serial_rho
from rlbench.core.stats import normal_quantile, student_quantile, trimmed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interval_study import ar1  # noqa: E402  (the same AR(1) draw as the verdict intervals' study)

SHAPES = ((5, 3), (6, 3), (10, 3), (20, 3), (5, 5), (10, 5))  # (iterations, runs)
PHIS = (0.0, 0.5, 0.8)


def old_estimate(x) -> tuple[float, float, float] | None:
    """A run's (centre, error, df) as the verdicts computed it before: 20% of every n trimmed, and no interval
    below one degree of freedom."""
    n, g = len(x), int(math.floor(0.2 * len(x)))
    centre, se = trimmed(x, g)
    rho = serial_rho(x)
    df = (n - 2 * g - 1) * (1 - rho * rho) / (1 + rho * rho)
    return None if df < 1 else (centre, se * math.sqrt(inflation(n, rho)), df)


def runs_of(rng, n: int, k: int, phi: float, sd: float, ratio: float, estimate) -> list[reruns.RunRatio]:
    """k runs' RunRatio from n paired log-ratios each; a run without an interval stays out of the test, as
    reruns.across leaves it out."""
    out = []
    for _ in range(k):
        found = estimate(ar1(rng, n, phi, sd) + math.log(ratio))
        if found is None:
            continue
        y, se, df = found
        t = student_quantile(0.975, df)
        out.append(reruns.RunRatio(Ratio(math.exp(y), math.exp(y - t * se), math.exp(y + t * se), n), y, se, t, df))
    return out


def before(runs: list[reruns.RunRatio]) -> tuple[bool, bool, bool]:
    """(the runs differ, the pooled interval lies above 1, below 1) by the replaced rule."""
    from scipy import stats  # inside: the replaced rule's distributions, this script only

    if len(runs) < 2:
        return False, False, False
    k, w = len(runs), [1 / r.se ** 2 for r in runs]
    mean = sum(wi * r.y for wi, r in zip(w, runs)) / sum(w)
    q = sum(wi * (r.y - mean) ** 2 for wi, r in zip(w, runs))
    c = sum(w) - sum(wi * wi for wi in w) / sum(w)
    tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    ws = [1 / (r.se ** 2 + tau2) for r in runs]
    centre = sum(wi * r.y for wi, r in zip(ws, runs)) / sum(ws)
    half = normal_quantile(0.975) / math.sqrt(sum(ws))
    return stats.chi2.sf(q, k - 1) < reruns.ALPHA, centre - half > 0, centre + half < 0


def after(runs: list[reruns.RunRatio]) -> tuple[bool, bool, bool]:
    a = reruns.Across("cell", "ref", runs)
    reruns._test(a)
    return a.differ, a.pooled.low > 1, a.pooled.high < 1


RULES = {"before": (before, old_estimate), "after": (after, log_estimate)}


def rates(rule: str, n: int, k: int, phi: float, ratio: float, reps: int, sd: float, seed: int) -> tuple:
    """(runs said to differ, pooled wins, pooled loses) as fractions of reps sets of k runs."""
    judge, estimate = RULES[rule]
    rng = np.random.default_rng([seed, n, k, int(phi * 100), int(ratio * 1000)])
    got = np.zeros(3)
    for _ in range(reps):
        got += judge(runs_of(rng, n, k, phi, sd, ratio, estimate))
    return tuple(got / reps)


def table(reps: int, sd: float, effect: float, seed: int) -> list[str]:
    out = ["| phi | iterations x runs | false \"runs differ\" before | after | false pooled word before | after "
           f"| pooled power ({effect:g}x) before | after |", "|" + "---|" * 8]
    for phi in PHIS:
        for n, k in SHAPES:
            fb, fa = (rates(r, n, k, phi, 1.0, reps, sd, seed) for r in RULES)
            pb, pa = (rates(r, n, k, phi, effect, reps, sd, seed) for r in RULES)
            out.append(f"| {phi:g} | {n} x {k} | {fb[0]:.1%} | {fa[0]:.1%} | {fb[1] + fb[2]:.1%} | {fa[1] + fa[2]:.1%} "
                       f"| {pb[1]:.0%} | {pa[1]:.0%} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=4000, help="simulated sets of runs per row and true ratio")
    p.add_argument("--sd", type=float, default=0.03, help="standard deviation of one iteration's log-ratio")
    p.add_argument("--effect", type=float, default=1.05, help="the true ratio the pooled power is measured at")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print("\n".join(table(a.reps, a.sd, a.effect, a.seed)))


if __name__ == "__main__":
    main()
