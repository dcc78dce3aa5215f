"""Do repeated runs of one config agree within the intervals each run prints? The run-to-run spread of every
periodic-async cell's speedup against its within-run intervals.

    .venv/bin/python scripts/rerun_spread.py RUN_DIR RUN_DIR [RUN_DIR ...]

Per cell: each run's speedup (the verdict's value) with its 95% interval and word; then, in log units,
the spread of the runs' values (their standard deviation) against the runs' own standard errors (an
interval's half-width / its t quantile, read back from the interval), Cochran's Q over the runs with its
p-value (small: the runs differ by more than their intervals allow), the between-run standard deviation tau
(DerSimonian-Laird: the part of the spread the intervals do not hold), and how often one run's value falls
inside another run's interval (about 83% if each interval holds its level and nothing else varies between
runs). The prediction's error per run is printed beside.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys

from scipy import stats as sps

from rlbench.analysis import data
from rlbench.analysis.speedup import speedup_frame
from rlbench.core.stats import LEVEL


def run_rows(path: str) -> list[dict]:
    frame = speedup_frame(data.load(path))
    return [dict(r) for _, r in frame.iterrows()]


def standard_error(value: float, low: float, high: float, n: int) -> float:
    """A run's standard error in log units, from its interval (half-width over the normal quantile: the
    t quantile's degrees of freedom are not kept in the results, so this errs small)."""
    return (math.log(high) - math.log(low)) / 2 / sps.norm.ppf(0.5 + LEVEL / 2)


def heterogeneity(y: list[float], se: list[float]) -> tuple[float, float, float]:
    """(Cochran's Q, its p-value on k - 1 degrees of freedom, DerSimonian-Laird tau) of log values y."""
    w = [1 / s ** 2 for s in se]
    mean = sum(wi * yi for wi, yi in zip(w, y)) / sum(w)
    q = sum(wi * (yi - mean) ** 2 for wi, yi in zip(w, y))
    k = len(y)
    c = sum(w) - sum(wi ** 2 for wi in w) / sum(w)
    tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    return q, float(sps.chi2.sf(q, k - 1)), math.sqrt(tau2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args(argv)
    by_cell: dict[str, list[dict]] = {}
    for path in args.runs:
        for r in run_rows(path):
            by_cell.setdefault(r["cell"], []).append(r)
    for cell, rows in by_cell.items():
        print(f"\n{cell}: {len(rows)} runs")
        for r in rows:
            err = r["error_pct"]
            print(f"  {r['measured_speedup']:.3f}× ({r['measured_low']:.3f}–{r['measured_high']:.3f}×, "
                  f"{r['measured_n']} pairs)  predicted {r['predicted_speedup']:.3f}× "
                  f"({'–' if err is None else f'{err:+.1f}%'})  {word(r)}")
        full = [r for r in rows if r["measured_low"] == r["measured_low"] and r["measured_low"] is not None]
        if len(full) < 2:
            continue
        y = [math.log(r["measured_speedup"]) for r in full]
        se = [standard_error(r["measured_speedup"], r["measured_low"], r["measured_high"], r["measured_n"])
              for r in full]
        q, p, tau = heterogeneity(y, se)
        inside = [lo <= rj["measured_speedup"] <= hi for i, (lo, hi) in
                  enumerate((r["measured_low"], r["measured_high"]) for r in full)
                  for j, rj in enumerate(full) if i != j]
        print(f"  log spread: sd of the runs' values {statistics.stdev(y):.4f}, the runs' own se median "
              f"{statistics.median(se):.4f}; Q {q:.1f} on {len(y) - 1} df (p {p:.3f}); between-run tau {tau:.4f}; "
              f"a run's value inside another's interval {sum(inside)}/{len(inside)}; words "
              f"{sorted({word(r) for r in rows})}")
    return 0


def word(r: dict) -> str:
    from rlbench.analysis.intervals import outcome
    return outcome(r["measured_speedup"], r["measured_low"], r["measured_high"]) or "–"


if __name__ == "__main__":
    sys.exit(main())
