"""Interleaved cells (run.interleave): every cell of an ablation runs in its own process at the same time,
but they take turns by iteration, cell 1 iteration k, cell 2 iteration k, ..., cell 1 iteration k+1.

Why: on a shared machine the speed drifts over minutes (another job starts, the CPU clocks down).
Cells run one after the other each see a different machine; interleaved, iteration k of every cell
sees nearly the same one, so the per-iteration ratio of two cells cancels the drift (ABAB design).
No timed work overlaps: cells set up and evaluate one after the other, and only then joins the turns; its final
evaluation is inside its last turn, and it closes its workers after every cell has finished.
"""
from __future__ import annotations

STARTING, RUNNING, GONE = 0, 1, 2


class Turns:
    """Shared turn state of n cell processes (made by the parent, handed to each child at start)."""

    def __init__(self, ctx, n: int):
        self.n = n
        self.cond = ctx.Condition()
        self.turn = ctx.RawValue("q", 0)  # turns taken: iteration k of cell i is turn k*n + i
        self.state = ctx.RawArray("b", n)  # STARTING | RUNNING | GONE per cell

    def _skip_gone(self) -> None:
        """Turns of cells that left (finished, failed, died) pass to the next cell."""
        if all(s == GONE for s in self.state):
            return
        while self.state[self.turn.value % self.n] == GONE:
            self.turn.value += 1

    def _set(self, i: int, state: int, advance: bool = False) -> None:
        with self.cond:
            self.state[i] = state
            if advance:
                self.turn.value += 1
            self._skip_gone()
            self.cond.notify_all()

    def wait_setup(self, i: int) -> None:
        """Cells set up one after the other (the first warms the model cache for the rest)."""
        with self.cond:
            self.cond.wait_for(lambda: STARTING not in self.state[:i])

    def ready(self, i: int) -> None:
        """Cell i is set up; turns start when no cell is still setting up."""
        self._set(i, RUNNING)

    def wait(self, i: int, k: int) -> None:
        """Block until it is cell i's turn for iteration k."""
        with self.cond:
            self.cond.wait_for(lambda: STARTING not in self.state[:] and self.turn.value == k * self.n + i)

    def done(self, i: int) -> None:
        """Cell i finished its iteration: the next cell's turn."""
        self._set(i, RUNNING, advance=True)

    def leave(self, i: int) -> None:
        """Cell i takes no more turns (finished, failed, or found dead by the parent); idempotent."""
        with self.cond:
            owner = self.state[i] != GONE and self.turn.value % self.n == i and STARTING not in self.state[:]
        self._set(i, GONE, advance=owner)

    def wait_all_left(self) -> None:
        """Block until every cell has left (so no cell tears down while another is timed)."""
        with self.cond:
            self.cond.wait_for(lambda: all(s == GONE for s in self.state))


class Pacer:
    """What a cell calls around its iterations; alone (the default) it never waits."""

    def __init__(self, turns: Turns | None = None, index: int = 0):
        self.turns, self.index = turns, index

    def setup(self) -> None:
        if self.turns:
            self.turns.wait_setup(self.index)

    def ready(self) -> None:
        if self.turns:
            self.turns.ready(self.index)

    def before(self, k: int) -> None:
        if self.turns:
            self.turns.wait(self.index, k)

    def after(self, k: int) -> None:
        if self.turns:
            self.turns.done(self.index)

    def leave(self, wait_for_others: bool = False) -> None:
        if self.turns:
            self.turns.leave(self.index)
            if wait_for_others:
                self.turns.wait_all_left()
