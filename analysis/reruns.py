"""Do repeated runs of one config say the same thing? Each cell's ratio over its reference in every
run, against the spread the runs' own intervals allow (`rlbench compare RUN RUN [RUN ...]`;
docs/metrics.md, 'Reruns').

For a cell present in every run (matched by name), run i gives its paired ratio
(analysis/intervals.py) and, in log units, its centre y_i, standard error s_i and degrees of freedom
d_i (core/ratio_interval.py log_estimate). The s_i come from a handful of iterations each, so they
are themselves uncertain; a test that takes them as known (Cochran's Q against chi-squared, a pooled
interval with the normal quantile) says "the runs differ" and calls a pooled difference that is not
there 15-20% of the time at 5 iterations a run. So:

- whether the runs differ: Welch's test of equal means with unequal, estimated variances (Welch
  1951, Biometrika 38:330), F on (k - 1, f) degrees of freedom, f from the runs' own d_i: its level
  holds with variances estimated from few values. Where p < ALPHA the runs differ by more than their
  intervals allow: something fixed for a whole run (a process's placement or memory, the machine
  that minute) moves the ratio. Its size, the between-run standard deviation tau, is DerSimonian and
  Laird's estimate from Cochran's Q = sum w_i (y_i - y_w)^2, w_i = 1 / s_i^2: tau^2 = max(0, (Q - (k
  - 1)) / (sum w - sum w^2 / sum w)); each run's interval widened by it (tau in quadrature with the
    run's own error) gives the word a run could
  honestly have said.
- the runs together: the random-effects mean (weights 1 / (s_i^2 + tau^2)) with Hartung and Knapp's
  interval (Hartung & Knapp 2001, Stat. Med. 20:3875): its variance from the runs' own scatter about
  the mean, never below the weights' (the modified form, Röver et al. 2015, BMC Med. Res. Methodol.
  15:99), and Student's t on k - 1 degrees of freedom. With 3 runs that is t on 2 (4.3 standard
  errors): the runs together call only what every run clearly shows.

`scripts/reruns_study.py` measures both on runs with no true difference and with one
(docs/results/reruns.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy import special

from rlbench.analysis import intervals
from rlbench.analysis.data import RunData
from rlbench.analysis.speedup import reference_of
from rlbench.core.ratio_interval import log_estimate
from rlbench.core.stats import LEVEL, student_quantile

ALPHA = 0.05  # Q's p-value below this: the runs differ by more than their intervals allow


@dataclass
class RunRatio:
    """One run's ratio for a cell: the interval it printed, and its log centre, error and t
    quantile."""
    ratio: intervals.Ratio
    y: float | None = None
    se: float | None = None
    t: float | None = None
    df: float | None = None

    def widened(self, tau: float) -> intervals.Ratio:
        """The printed interval widened by a between-run standard deviation tau (log units)."""
        if self.se is None:
            return self.ratio
        half = self.t * math.sqrt(self.se ** 2 + tau ** 2)
        return intervals.Ratio(self.ratio.value, math.exp(self.y - half), math.exp(self.y + half),
                               self.ratio.n,
                               self.ratio.basis)


@dataclass
class Across:
    """A cell across the runs: each run's ratio, the heterogeneity test, the pooled ratio."""
    cell: str
    reference: str
    runs: list[RunRatio] = field(default_factory=list)
    q: float | None = None  # Cochran's Q (tau's estimate)
    f: float | None = None  # Welch's F, on (k - 1, df2) degrees of freedom
    df2: float | None = None
    p: float | None = None  # Welch's test
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
    return RunRatio(printed, y, se, student_quantile(0.5 + LEVEL / 2, df), df)


def _test(a: Across) -> None:
    """Welch's test, tau and the pooled ratio (Hartung-Knapp) over the runs with an interval (module
    docstring)."""
    full = [r for r in a.runs if r.se is not None and r.se > 0]
    if len(full) < 2:
        return
    k = len(full)
    w = [1 / r.se ** 2 for r in full]
    mean = sum(wi * r.y for wi, r in zip(w, full)) / sum(w)
    a.q = sum(wi * (r.y - mean) ** 2 for wi, r in zip(w, full))
    a.f, a.df2, a.p = welch(full)
    c = sum(w) - sum(wi * wi for wi in w) / sum(w)
    a.tau = math.sqrt(max(0.0, (a.q - (k - 1)) / c)) if c > 0 else 0.0
    a.pooled = hartung_knapp(full, a.tau)


def welch(runs: list[RunRatio]) -> tuple[float, float, float]:
    """Welch's F for equal means with unequal estimated variances: (F, its second degrees of
    freedom, p)."""
    k = len(runs)
    w = [1 / r.se ** 2 for r in runs]
    total = sum(w)
    mean = sum(wi * r.y for wi, r in zip(w, runs)) / total
    lam = sum((1 - wi / total) ** 2 / r.df for wi, r in zip(w, runs))
    a = sum(wi * (r.y - mean) ** 2 for wi, r in zip(w, runs)) / (k - 1)
    f = a / (1 + 2 * (k - 2) / (k * k - 1) * lam)
    df2 = (k * k - 1) / (3 * lam) if lam > 0 else math.inf
    return f, df2, float(special.fdtrc(k - 1, df2, f))


def hartung_knapp(runs: list[RunRatio], tau: float) -> intervals.Ratio:
    """The random-effects mean of the runs' log-ratios with the modified Hartung-Knapp interval:
    variance max(1, q) / sum w*, q the weighted scatter about the mean over k - 1, t on k - 1
    degrees of freedom."""
    k = len(runs)
    w = [1 / (r.se ** 2 + tau ** 2) for r in runs]
    centre = sum(wi * r.y for wi, r in zip(w, runs)) / sum(w)
    q = sum(wi * (r.y - centre) ** 2 for wi, r in zip(w, runs)) / (k - 1)
    half = student_quantile(0.5 + LEVEL / 2, k - 1) * math.sqrt(max(1.0, q) / sum(w))
    return intervals.Ratio(math.exp(centre), math.exp(centre - half), math.exp(centre + half), k,
                           f"runs ({sum(r.ratio.n for r in runs)} paired iterations)")
