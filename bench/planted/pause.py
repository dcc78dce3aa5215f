"""A planted pause between iterations: what an evaluation, the driver's bookkeeping or another
interleaved cell's turn does to a cell, with a length the test chooses.

    RLBENCH_PAUSE=SECONDS@K[,K...]

sleeps SECONDS in the cell's driver after iteration K-1 is recorded and before iteration K starts,
for each listed K. No schedule's TPSPD may change with it: nothing between iterations is inside an
iteration's window, and a schedule whose rollout runs ahead holds its rollout workers meanwhile
(docs/metrics.md, "One window for every schedule"). Off unless set; a malformed spec exits 2.
"""
from __future__ import annotations

import os
import time

from rlbench.core.errors import UserError

ENV = "RLBENCH_PAUSE"
MAX_S = 60.0


def parse(spec: str) -> tuple[float, frozenset[int]]:
    """'1.0@2,4' -> (1.0, {2, 4}); anything else is a UserError saying what is allowed."""
    seconds, _, at = spec.partition("@")
    try:
        value = float(seconds)
        iterations = frozenset(int(k) for k in at.split(",") if k.strip())
    except ValueError:
        value, iterations = float("nan"), frozenset()
    if not 0.0 < value <= MAX_S or not iterations or min(iterations) < 1:
        raise UserError(f"{ENV}={spec!r}: need SECONDS@K[,K...] with 0 < SECONDS <= {MAX_S:g} and "
                        f"iterations K >= 1 that the pause precedes (e.g. 1.0@2,4)")
    return value, iterations


def check() -> None:
    """A malformed RLBENCH_PAUSE is refused before any work starts."""
    if os.environ.get(ENV):
        parse(os.environ[ENV])


def before(iteration: int) -> None:
    """Sleep here when RLBENCH_PAUSE names this iteration (called between two iterations)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    seconds, iterations = parse(spec)
    if iteration in iterations:
        time.sleep(seconds)
