"""How often a verdict word is wrong, how often a real difference is called, and how often the rule says
"too few", by the interval rule of core/ratio_interval.py (after) and by the rule it replaced (before:
20% of every n trimmed, g = floor(0.2 n), and no interval where fewer than one degree of freedom is left once
the serial correlation is accounted for).

Paired log-ratios are drawn as a stationary AR(1) series (lag-1 correlation phi, marginal standard deviation
--sd, 3% by default) around log(true ratio). With a true ratio of 1, a "wins" or "loses" is a false
verdict; with a true ratio of 1.1 (--effect), "wins" is the power. "too few" counts the runs the rule
declines to call. Prints a markdown table (docs/results/intervals.md).

    .venv/bin/python scripts/interval_study.py --reps 10000 --seed 1
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from rlbench.core import ratio_interval as ri
from rlbench.core.stats import TRIM, normal_quantile, t_quantile, trimmed

NS = (4, 5, 6, 7, 8, 10, 12, 15, 20)
PHIS = (0.0, 0.5, 0.8)


def before(x) -> tuple[float, float] | None:
    """The replaced rule's interval of the typical ratio, (low, high): 20% of every n trimmed, None below 4
    values or below one degree of freedom."""
    n = len(x)
    if n < ri.MIN_PAIRED:
        return None
    g = int(math.floor(TRIM * n))
    d, se = trimmed(x, g)
    rho = ri.serial_rho(x)
    se *= math.sqrt(ri.inflation(n, rho))
    df = (n - 2 * g - 1) * (1 - rho * rho) / (1 + rho * rho)
    if df < 1:
        return None
    t = t_quantile(normal_quantile(0.975), df)
    return math.exp(d - t * se), math.exp(d + t * se)


def after(x) -> tuple[float, float] | None:
    r = ri.ratio_interval(x)
    return None if r is None else r[1:]


def ar1(rng, n: int, phi: float, sd: float) -> np.ndarray:
    """n values of a stationary AR(1) series with lag-1 correlation phi and marginal standard deviation sd."""
    e = rng.normal(0.0, sd * math.sqrt(1 - phi * phi), n)
    x = np.empty(n)
    x[0] = rng.normal(0.0, sd)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return x


def rates(rule, n: int, phi: float, ratio: float, reps: int, sd: float, seed: int) -> tuple[float, float, float]:
    """(wins, loses, too few) as fractions of reps runs of n paired iterations."""
    rng = np.random.default_rng([seed, n, int(phi * 100), int(ratio * 1000)])
    wins = loses = few = 0
    for _ in range(reps):
        iv = rule(ar1(rng, n, phi, sd) + math.log(ratio))
        if iv is None:
            few += 1
        elif iv[0] > 1:
            wins += 1
        elif iv[1] < 1:
            loses += 1
    return wins / reps, loses / reps, few / reps


def table(reps: int, sd: float, effect: float, seed: int) -> list[str]:
    head = ("| phi | n | false verdicts before | false verdicts after | too few before | too few after "
            f"| power before ({effect:g}x) | power after ({effect:g}x) |")
    out = [head, "|" + "---|" * 8]
    for phi in PHIS:
        for n in NS:
            fb = rates(before, n, phi, 1.0, reps, sd, seed)
            fa = rates(after, n, phi, 1.0, reps, sd, seed)
            pb = rates(before, n, phi, effect, reps, sd, seed)
            pa = rates(after, n, phi, effect, reps, sd, seed)
            out.append(f"| {phi:g} | {n} | {fb[0] + fb[1]:.1%} | {fa[0] + fa[1]:.1%} | {fb[2]:.0%} | {fa[2]:.0%} "
                       f"| {pb[0]:.0%} | {pa[0]:.0%} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=10000, help="simulated runs per (phi, n, ratio)")
    p.add_argument("--sd", type=float, default=0.03, help="standard deviation of one log-ratio")
    p.add_argument("--effect", type=float, default=1.1, help="the true ratio the power is measured at")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print("\n".join(table(a.reps, a.sd, a.effect, a.seed)))


if __name__ == "__main__":
    main()
