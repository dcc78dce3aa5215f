"""Every verdict from an interval: a ratio of two cells' TPSPD, with the 95% interval that says
whether the run can tell it from 1 (docs/metrics.md, 'Verdicts').

One estimator per comparison: the ratio stated beside an interval is the centre of that interval
(core/ratio_interval.py). Both come from paired samples: per iteration, cell TPSPD_k / reference
TPSPD_k over the iterations both measured (both draw the same response lengths for iteration k, and
when the cells take turns, run.interleave, the two ran back to back on nearly the same machine), or,
for a run of several seeds, one ratio per seed. The value is exp of the 20%-trimmed mean of the
log-ratios (the typical paired ratio, robust to a stalled iteration); its interval is the
Tukey-McLaughlin error, grown for the serial correlation of successive iterations, with Student's t.
A ratio *wins* (is faster) only where the whole interval lies above 1, *loses* (is slower) only
where it lies below, and is *even* otherwise: what one run says is what its next run would say too.
Where the samples are too few to hold the interval's level (fewer than 4, or a short series that
looks strongly correlated) there is no interval, the value is the ratio of the two cells' TPSPD
medians, and the word is *too few* (iterations or seeds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlbench.core.results import schema
from rlbench.core.ratio_interval import ratio_interval
from rlbench.core.stats import LEVEL

# annotations only: data.py imports pandas, which `rlbench plan` (outcome) never needs
if TYPE_CHECKING:
    from rlbench.analysis.data import CellData

WINS, LOSES, EVEN, TOO_FEW = "wins", "loses", "even", "too few"
# A ratio of cells run one after another (run.interleave=false) whose interval excludes 1: a slow
# stretch of the machine during one cell's iterations alone moves the ratio and no interval over its
# iterations sees it (a machine 20% slower while the reference ran makes the ratio 1.25x, and its
# interval "wins"), so no wins / loses word.
NOT_CALLED = "not called"
# what an interval is over
ITERATIONS, INTERLEAVED, SEEDS = "iterations", "interleaved iterations", "seeds"


@dataclass(frozen=True)
class Ratio:
    """value: the typical paired ratio, the centre of [low, high] (no interval: the ratio of TPSPD
    medians); low, high: its interval (None: too few samples to hold its level); n: paired samples;
    basis: ITERATIONS (cells one after another), INTERLEAVED or SEEDS."""
    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    basis: str = ITERATIONS

    @property
    def outcome(self) -> str | None:
        return outcome(self.value, self.low, self.high, self.basis)


def outcome(value, low, high, basis: str | None = None) -> str | None:
    """WINS where the interval lies above 1, LOSES where below, EVEN otherwise; TOO_FEW where a
    value has no interval; None: nothing measured. basis ITERATIONS (cells one after another):
    NOT_CALLED in place of WINS or LOSES (the machine's drift between the cells is not in the
    interval)."""
    if _missing(value):
        return None
    if _missing(low) or _missing(high):
        return TOO_FEW
    word = WINS if low > 1.0 else LOSES if high < 1.0 else EVEN
    return NOT_CALLED if basis == ITERATIONS and word in (WINS, LOSES) else word


def paired(cell: CellData | None, ref: CellData | None) -> Ratio:
    """cell's TPSPD over ref's: the typical per-iteration ratio (in iteration order) with its
    interval."""
    if cell is None or ref is None:
        return Ratio(None)
    value = schema.ratio(cell.tpspd(), ref.tpspd())
    basis = INTERLEAVED if _interleaved(cell) and _interleaved(ref) else ITERATIONS
    return _with_interval(value, paired_logs(cell, ref), basis, serial=True)


def paired_logs(cell: CellData, ref: CellData) -> list[float]:
    """log(cell TPSPD_k / ref TPSPD_k) over the measured iterations k both have, in iteration
    order."""
    ours = {it["iteration"]: it.get("tpspd") for it in ref.measured()}
    return [math.log(it["tpspd"] / ours[it["iteration"]])
            for it in sorted(cell.measured(), key=lambda it: it["iteration"])
            if ours.get(it["iteration"]) and it.get("tpspd")]


def over_seeds(ratios: list[float | None], value: float | None) -> Ratio:
    """A ratio measured once per seed (value: their median, as the tables aggregate seeds, where
    they are too few for an interval). Seeds are independent runs: no serial correlation."""
    logs = [math.log(r) for r in ratios if not _missing(r) and r > 0]
    return _with_interval(value, logs, SEEDS, serial=False)


def _with_interval(value, logs: list[float], basis: str, serial: bool) -> Ratio:
    """The Ratio of paired log-ratios: their typical ratio and its interval, or value without
    one."""
    found = ratio_interval(logs, serial=serial) if value is not None else None
    if found is None:
        return Ratio(value, None, None, len(logs), basis)
    return Ratio(*found, len(logs), basis)


def columns(r: Ratio, prefix: str, value_key: str | None = None) -> dict:
    """A ratio's interval as a frame's columns: <prefix>_low, _high, _n, _basis, and with value_key
    the value itself (the centre of the interval), so that a table never sets another estimate
    beside it."""
    out = {value_key: r.value} if value_key else {}
    return out | {f"{prefix}_low": r.low, f"{prefix}_high": r.high, f"{prefix}_n": r.n,
                  f"{prefix}_basis": r.basis}


def from_columns(row: dict, value_key: str, prefix: str) -> Ratio:
    """The Ratio a frame's row holds (columns() wrote it)."""
    value, basis = row.get(value_key), row.get(f"{prefix}_basis")
    return Ratio(None if _missing(value) else float(value), _num(row.get(f"{prefix}_low")),
                 _num(row.get(f"{prefix}_high")), int(_num(row.get(f"{prefix}_n")) or 0),
                 basis if isinstance(basis, str) else ITERATIONS)


def inverted(r: Ratio) -> Ratio:
    """The same comparison the other way round (b over a)."""
    inv = lambda v: None if _missing(v) or v == 0 else 1.0 / v
    return Ratio(inv(r.value), inv(r.high), inv(r.low), r.n, r.basis)


# Said of a ratio whose cells ran one after another (run.interleave=false): a slow minute of the
# machine fell on one side of it only, and its interval cannot see that.
SEQUENTIAL = ", the cells one after another: exposed to the machine's drift"


def described(r: Ratio) -> str:
    """'95% interval 0.91–0.97× over 17 interleaved iterations', or why there is none; a ratio of
    cells run one after another says that it is exposed to drift."""
    drift = SEQUENTIAL if r.basis == ITERATIONS else ""
    if r.low is None:
        return (
            f"too few paired {r.basis} for a {LEVEL:.0%} interval ({r.n}; ratio of medians){drift}"
        )
    return f"{LEVEL:.0%} interval {r.low:.2f}–{r.high:.2f}× over {r.n} {r.basis}{drift}"


def _interleaved(c: CellData) -> bool:
    return c.config.run.interleave


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _num(v):
    return None if _missing(v) else float(v)
