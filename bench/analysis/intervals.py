"""Every verdict from an interval: a ratio of two cells' TPSPD, with the 95% interval that says whether the
run can tell it from 1 (docs/metrics.md, 'Verdicts').

The ratio stated is that of the two cells' TPSPD medians over their measured iterations (the tables' TPSPD
column). Its interval comes from paired samples: per iteration, cell TPSPD_k / reference TPSPD_k over the
iterations both measured (both draw the same response lengths for iteration k, and when the cells take
turns, run.interleave, the two ran back to back on nearly the same machine), or, for a run of several
seeds, one ratio of medians per seed. The interval is that of the typical paired ratio: the 20%-trimmed
mean of the log-ratios with the Tukey-McLaughlin error and Student's t (bench/core/stats.py, the statistic
`rlbench check --against` judges its paired A/B with). A ratio *wins* (is faster) only where the whole
interval lies above 1, *loses* (is slower) only where it lies below, and is *even* otherwise: what one
run says is what its next run would say too. Fewer than 3 paired samples give no interval: even.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rlbench.analysis.data import CellData
from rlbench.core.results import schema
from rlbench.core.stats import LEVEL, log_ratio_interval

WINS, LOSES, EVEN = "wins", "loses", "even"
ITERATIONS, INTERLEAVED, SEEDS = "iterations", "interleaved iterations", "seeds"  # what an interval is over


@dataclass(frozen=True)
class Ratio:
    """value: the ratio of TPSPD medians; low, high: its interval (None: no interval, fewer than 3 samples);
    n: paired samples; basis: ITERATIONS (cells one after another), INTERLEAVED or SEEDS."""
    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    basis: str = ITERATIONS

    @property
    def outcome(self) -> str | None:
        return outcome(self.value, self.low, self.high)


def outcome(value, low, high) -> str | None:
    """WINS where the interval lies above 1, LOSES where below, EVEN otherwise; None: nothing measured."""
    if _missing(value):
        return None
    if not _missing(low) and low > 1.0:
        return WINS
    if not _missing(high) and high < 1.0:
        return LOSES
    return EVEN


def paired(cell: CellData | None, ref: CellData | None) -> Ratio:
    """cell's TPSPD over ref's, with the interval from their per-iteration ratios."""
    if cell is None or ref is None:
        return Ratio(None)
    value = schema.ratio(cell.tpspd(), ref.tpspd())
    ours = {it["iteration"]: it.get("tpspd") for it in ref.measured()}
    logs = [math.log(it["tpspd"] / ours[it["iteration"]]) for it in cell.measured()
            if ours.get(it["iteration"]) and it.get("tpspd")]
    basis = INTERLEAVED if _interleaved(cell) and _interleaved(ref) else ITERATIONS
    return _with_interval(value, logs, basis)


def over_seeds(ratios: list[float | None], value: float | None) -> Ratio:
    """A ratio measured once per seed (value: their median, as the tables aggregate seeds)."""
    logs = [math.log(r) for r in ratios if not _missing(r) and r > 0]
    return _with_interval(value, logs, SEEDS)


def _with_interval(value, logs: list[float], basis: str) -> Ratio:
    low, high = log_ratio_interval(logs) if value is not None else (0.0, math.inf)
    if not math.isfinite(high):
        return Ratio(value, None, None, len(logs), basis)
    return Ratio(value, low, high, len(logs), basis)


def columns(r: Ratio, prefix: str) -> dict:
    """A ratio's interval as a frame's columns: <prefix>_low, _high, _n, _basis."""
    return {f"{prefix}_low": r.low, f"{prefix}_high": r.high, f"{prefix}_n": r.n, f"{prefix}_basis": r.basis}


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


def described(r: Ratio) -> str:
    """'95% interval 0.91–0.97× over 17 interleaved iterations', or why there is none."""
    if r.low is None:
        return f"too few paired {r.basis} for an interval ({r.n})"
    return f"{LEVEL:.0%} interval {r.low:.2f}–{r.high:.2f}× over {r.n} {r.basis}"


def _interleaved(c: CellData) -> bool:
    return c.config.run.interleave


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _num(v):
    return None if _missing(v) else float(v)
