"""Do repeated runs of one config say the same thing? Each cell's ratio over its reference in every run,
against the spread the runs' own intervals allow (`rlbench compare RUN RUN [RUN ...]`; docs/metrics.md,
'Reruns').

For a cell present in every run (matched by name), run i gives its paired ratio (bench/analysis/intervals.py)
and, in log units, its centre y_i and standard error s_i (bench/core/ratio_interval.py log_estimate). If the
runs differ only as their intervals say, Cochran's Q = sum w_i (y_i - y_w)^2, w_i = 1 / s_i^2, follows
chi-squared on k - 1 degrees of freedom. Where its p-value is below 5% the runs differ by more than their
intervals allow: something that stays fixed for a whole run and changes between runs (a process's placement
or memory, the machine's state that minute) moves the ratio, and a run's interval cannot see it. Its size,
the between-run standard deviation tau, is DerSimonian and Laird's estimate, tau^2 = max(0, (Q - (k - 1)) /
(sum w - sum w^2 / sum w)); each run's interval widened by it (tau in quadrature with the run's own error)
gives the word a run could honestly have said, and the pooled ratio over the runs (weights 1 / (s_i^2 +
tau^2), a normal interval) the word the runs say together. With 2 or 3 runs tau is a rough estimate:
the test is weak there, so the words across runs are reported beside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy import stats as sps

from rlbench.analysis import intervals
from rlbench.analysis.data import RunData
from rlbench.analysis.speedup import reference_of
from rlbench.core.ratio_interval import log_estimate
from rlbench.core.stats import LEVEL

ALPHA = 0.05  # Q's p-value below this: the runs differ by more than their intervals allow


@dataclass
class RunRatio:
    """One run's ratio for a cell: the interval it printed, and its log centre, error and t quantile."""
    ratio: intervals.Ratio
    y: float | None = None
    se: float | None = None
    t: float | None = None

    def widened(self, tau: float) -> intervals.Ratio:
        """The printed interval widened by a between-run standard deviation tau (log units)."""
        if self.se is None:
            return self.ratio
        half = self.t * math.sqrt(self.se ** 2 + tau ** 2)
        return intervals.Ratio(self.ratio.value, math.exp(self.y - half), math.exp(self.y + half), self.ratio.n,
                               self.ratio.basis)


@dataclass
class Across:
    """A cell across the runs: each run's ratio, the heterogeneity test, the pooled ratio."""
    cell: str
    reference: str
    runs: list[RunRatio] = field(default_factory=list)
    q: float | None = None
    p: float | None = None
    tau: float = 0.0
    pooled: intervals.Ratio | None = None

    @property
    def differ(self) -> bool:
        """The runs differ by more than their intervals allow."""
        return self.p is not None and self.p < ALPHA

    @property
    def words(self) -> list[str | None]:
        return [r.ratio.outcome for r in self.runs]

    @property
    def widened_words(self) -> list[str | None]:
        return [r.widened(self.tau).outcome for r in self.runs]


def across(runs: list[RunData]) -> list[Across]:
    """Every cell that is not its own reference and is in every run, in the first run's order."""
    out = []
    for c in runs[0].cells:
        ref = reference_of(runs[0], c)
        if ref is c or any(r.cell(c.name) is None or r.cell(ref.name) is None for r in runs[1:]):
            continue
        a = Across(c.name, ref.name, [_run_ratio(r, c.name, ref.name) for r in runs])
        _test(a)
        out.append(a)
    return out


def _run_ratio(run: RunData, cell: str, ref: str) -> RunRatio:
    c, r = run.cell(cell), run.cell(ref)
    printed = intervals.paired(c, r)
    found = log_estimate(intervals.paired_logs(c, r), serial=True)
    if found is None or printed.low is None:
        return RunRatio(printed)
    y, se, df = found
    return RunRatio(printed, y, se, float(sps.t.ppf(0.5 + LEVEL / 2, df)))


def _test(a: Across) -> None:
    """Cochran's Q, its p-value, tau and the pooled ratio over the runs with an interval (module docstring)."""
    full = [r for r in a.runs if r.se is not None and r.se > 0]
    if len(full) < 2:
        return
    w = [1 / r.se ** 2 for r in full]
    mean = sum(wi * r.y for wi, r in zip(w, full)) / sum(w)
    a.q = sum(wi * (r.y - mean) ** 2 for wi, r in zip(w, full))
    k = len(full)
    a.p = float(sps.chi2.sf(a.q, k - 1))
    c = sum(w) - sum(wi * wi for wi in w) / sum(w)
    a.tau = math.sqrt(max(0.0, (a.q - (k - 1)) / c)) if c > 0 else 0.0
    ws = [1 / (r.se ** 2 + a.tau ** 2) for r in full]
    centre = sum(wi * r.y for wi, r in zip(ws, full)) / sum(ws)
    half = float(sps.norm.ppf(0.5 + LEVEL / 2)) / math.sqrt(sum(ws))
    a.pooled = intervals.Ratio(math.exp(centre), math.exp(centre - half), math.exp(centre + half), k,
                               f"runs ({sum(r.ratio.n for r in full)} paired iterations)")
