"""A regression confined to one cell (`RLBENCH_SLOW=work:F@CELL`: every working stage of that cell F
slower), as `rlbench check --calibrate` shifts it into unchanged A/B runs (bench/check/ab_power.py).

What the slowdown moves, per paired metric, in log(1 + F) units in its bad direction:
- tpspd:<cell>: the cell's iterations take F longer;
- cost:<stage>: the samples of that cell (pooled metrics keep (cell, iteration) keys), not the other
  cells';
- a between-cell ratio (speedup, the switch gains, stage_cost): +1 where the cell is the numerator,
  -1 (a move in the good direction) where it is the denominator.
Not moved, so not counted: queue_cost (the cell's hand-off and reward both slow), process_cpu (a
process's CPU grows by less than F: not all of it is stage work), the metrics outside the
iterations. The detection rate is thus a lower bound; the real planted runs are the validation.
"""
from __future__ import annotations

import math

from rlbench.check import ab as check_ab
from rlbench.planted import slowdown
from rlbench.core.results.metric_table import family


def cells_of(metrics: dict) -> list[str]:
    """The cells of an A/B run, from its tpspd:<cell> metrics (in the run's order)."""
    return [n.split(":", 1)[1] for n in metrics if family(n) == "tpspd"]


def effect(name: str, m: dict, cell: str) -> list[int]:
    """Per sample of a paired metric: +1 where a slowdown of `cell` moves it the bad way, -1 the
    good way, 0 not."""
    n = len(m["log_ratios"] or [])
    fam = family(name)
    if fam == "tpspd":
        return [int(name == f"tpspd:{cell}")] * n
    if fam == "cost":
        return [int(k[0] == cell) for k in m["keys"]]
    if fam in check_ab.BETWEEN_CELLS and m.get("cells"):
        num, den = m["cells"][:2]
        return [int(cell == num) - int(cell == den)] * n
    return [0] * n


def shift(cell: str, f: float):
    """shift_of for bench/check/ab_power.py _rates: the slowdown f of `cell`'s work."""
    def shift_of(metrics: dict):
        out, moved = {}, set()
        for name, m in metrics.items():
            if not m["log_ratios"]:
                continue
            e = effect(name, m, cell)
            if any(e):
                sign = 1 if m["direction"] == "lower_is_better" else -1
                out[name] = [sign * k * math.log1p(f) for k in e]
                moved |= {name} if max(e) > 0 else set()
        return out, moved
    return shift_of


def planted_hit(planted: dict, metrics: dict, flagged: set[str]) -> bool | None:
    """For a real run planted with work:F@CELL: did it flag a metric that slowdown moves the bad
    way? None for other plants (they slow a component of every cell: the component table's
    validation)."""
    parts = slowdown.parse(planted.get(slowdown.ENV, ""))
    if len(parts) != 1 or parts[0][0] != "work" or parts[0][2] is None:
        return None
    cell = parts[0][2]
    return any(max(effect(n, metrics[n], cell), default=0) > 0 for n in flagged)
