"""Interleaved cells (run.interleave): cells run in their own processes at the same time but take
turns by iteration, cell 1 iteration k, cell 2 iteration k, ..., cell 1 iteration k+1.

Why: on a shared machine the speed drifts over minutes (another job starts, the CPU clocks down).
Cells run one after the other each see a different machine; interleaved, iteration k of every cell
sees nearly the same one, so the per-iteration ratio of two cells cancels the drift (ABAB design).
No timed work overlaps: cells set up one after the other (the two sides of an A/B together), turns
start when every cell is set up, and a cell closes its workers only after every cell has left.

The turns live in a folder (the *ring*), not in one parent's memory, so that two `rlbench run`
processes of two source trees can share them: `rlbench check --against REF` runs the old and the new
tree's cells as two *sides* of one ring (RLBENCH_RING=<folder>:<side>), and iteration k of a cell
runs old, new (or new, old: the order alternates by iteration) back to back. The folder holds
state.json (read and written under an flock) and one FIFO per seat to wake it; a waiting seat sleeps
in select() (no CPU) and re-reads the state when woken or every POLL_S. A seat whose process died is
found by its pid and passes its turns on; a side whose `rlbench run` ended is abandoned by whoever
started it. The protocol is versioned (PROTOCOL): both trees of an A/B must speak the same one. Any
change to how seats take turns (the state's keys, the order, when a seat may set up) is a new
protocol, because a tree with the old rules in the same ring breaks the new ones' guarantees:
PROTOCOL_CODE is a fingerprint of this module's ring code (everything but Pacer, docstrings and
comments; tests/meta/test_ring_protocol.py computes it and fails when the code moves without it), so
that a change cannot go out under the old number. 1: the first ring; 2: every cell waits for every
side to register before it sets up, the first also for every cell process to reach its set-up.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import time
from pathlib import Path

from rlbench.core.errors import UserError

PROTOCOL = 2
# code_fingerprint() of the code of PROTOCOL: change both together where the rules change; a fix
# or a reformatting that keeps them (lines broken within 100 characters) moves this alone
PROTOCOL_CODE = "082a9935c01cac8e"
# "<folder>:<side>": join that ring as that side (set by `rlbench check --against`)
ENV = "RLBENCH_RING"
STARTING, RUNNING, GONE = "starting", "running", "gone"
# a waiting seat re-reads the state this often even when nobody wakes it (dead processes)
POLL_S = 0.5
STATE, LOCK = "state.json", "lock"


def from_env() -> tuple[Path, int] | None:
    """(folder, side) from RLBENCH_RING, or None when the run is not part of a shared ring."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    folder, _, side = raw.rpartition(":")
    return Path(folder), int(side)


class Ring:
    """The shared turn state of every seat (cell process) of every side (source tree)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    @classmethod
    def create(cls, folder: Path, sides: int = 1) -> "Ring":
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / LOCK).touch()
        state = {"protocol": PROTOCOL, "sides": sides, "registered": [], "seats": {}, "round": 0,
                 "pos": 0}
        (folder / STATE).write_text(json.dumps(state))
        return cls(folder)

    # ------------------------------------------------------------- state

    @contextlib.contextmanager
    def _locked(self, write: bool = True):
        """The state, under the lock; changes are saved (and every seat woken) when write is
        true."""
        with open(self.folder / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads((self.folder / STATE).read_text())
            yield state
            if write:
                _skip_gone(state)
                tmp = self.folder / f"{STATE}.tmp"
                tmp.write_text(json.dumps(state))
                os.replace(tmp, self.folder / STATE)
        if write:
            self._wake_all(state)

    def _wake_all(self, state: dict) -> None:
        for seat in state["seats"]:
            try:
                fd = os.open(self.folder / f"{seat}.fifo", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # nobody holds it open (gone, or not started yet): nothing to wake
                continue
            try:
                os.write(fd, b"!")
            except BlockingIOError:  # a full pipe already holds a wake-up
                pass
            # its seat closed it between the open and the write: nothing to wake
            except BrokenPipeError:
                pass
            finally:
                os.close(fd)

    def register(self, side: int, names: list[str], pid: int | None = None) -> list["Seat"]:
        """A side's cells take seats 0..n-1 (the parent, before starting them); -> their seats."""
        seats = [Seat(self.folder, side, i) for i in range(len(names))]
        for s in seats:
            os.mkfifo(self.folder / f"{s.id}.fifo")
        with self._locked() as st:
            if st["protocol"] != PROTOCOL:  # another tree's rules in one ring: refused, never mixed
                raise UserError(f"turn ring {self.folder} speaks protocol {st['protocol']}, this "
                                f"tree {PROTOCOL}: "
                                "both sides of `rlbench check --against` must take turns by the "
                                "same rules")
            for s, name in zip(seats, names):
                st["seats"][s.id] = {"side": side, "index": s.index, "name": name,
                                     "state": STARTING,
                                     "pid": None, "parent": pid or os.getpid()}
            st["registered"] = sorted(set(st["registered"]) | {side})
        return seats

    def abandon(self, side: int) -> None:
        """Side `side` runs no more (its `rlbench run` ended, however): its seats leave, and nobody
        waits for it to register."""
        with self._locked() as st:
            for seat in st["seats"].values():
                if seat["side"] == side:
                    seat["state"] = GONE
            st["registered"] = sorted(set(st["registered"]) | {side})


def _order(state: dict, k: int) -> list[str]:
    """Seats in round k's order: by cell index; the sides alternate which goes first (ABBA)."""
    sign = 1 if k % 2 == 0 else -1
    return sorted(state["seats"],
                  key=lambda s: (state["seats"][s]["index"], sign * state["seats"][s]["side"]))


def _started(state: dict) -> bool:
    return len(state["registered"]) == state["sides"] and \
        all(s["state"] != STARTING for s in state["seats"].values())


def _current(state: dict) -> str | None:
    order = _order(state, state["round"])
    return order[state["pos"]] if order and state["pos"] < len(order) else None


def _advance(state: dict) -> None:
    state["pos"] += 1
    if state["pos"] >= len(state["seats"]):
        state["round"], state["pos"] = state["round"] + 1, 0


def _skip_gone(state: dict) -> None:
    """Turns of seats that left (finished, failed, died) pass to the next seat."""
    seats = state["seats"]
    if not _started(state) or all(s["state"] == GONE for s in seats.values()):
        return
    while seats[_current(state)]["state"] == GONE:
        _advance(state)


def _alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Seat:
    """One cell's place in the ring; picklable (a folder and two numbers), reopened in the cell
    process."""

    def __init__(self, folder: Path, side: int, index: int):
        self.ring, self.side, self.index = Ring(folder), side, index
        self.id = f"s{side}c{index}"
        self._fifo = None

    def __getstate__(self):
        return {"folder": str(self.ring.folder), "side": self.side, "index": self.index}

    def __setstate__(self, d):
        self.__init__(Path(d["folder"]), d["side"], d["index"])

    def _wait(self, ready) -> None:
        """Sleep until ready(state) holds; seats whose process died are marked gone meanwhile."""
        if self._fifo is None:
            self._fifo = os.open(self.ring.folder / f"{self.id}.fifo", os.O_RDWR | os.O_NONBLOCK)
        while True:
            with self.ring._locked(write=False) as st:
                if ready(st):
                    return
                dead = [s for s, v in st["seats"].items() if v["state"] != GONE and s != self.id
                        and not (_alive(v["pid"]) and _alive(v["parent"]))]
            if dead:
                with self.ring._locked() as st:
                    for s in dead:
                        st["seats"][s]["state"] = GONE
                continue
            if select.select([self._fifo], [], [], POLL_S)[0]:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._fifo, 4096)

    def _set(self, state: str, advance: bool = False) -> None:
        with self.ring._locked() as st:
            st["seats"][self.id]["state"] = state
            if advance:
                _advance(st)

    def setup(self) -> None:
        """Cells set up one after the other: after every seat of a lower cell index. The sides set
        up the same cell at once (setup is not timed; on two cores or more that halves it), except
        the very first, which warms the model cache alone so that the other side finds it warm.
        Every cell waits for every side to register, so a side that registers late still sets up
        cell by cell with the other; the first also waits until every seat's process has come this
        far (its imports done): else the first side's first cell set up while the others still
        imported, and its start-up (judged by `check --against`) was up to 25% slower than the other
        side's, where the two of any other cell agree."""
        def ready(st: dict) -> bool:
            if len(st["registered"]) < st["sides"]:
                return False  # a side that registers late sets up its lower cells first
            if self.index == 0 and any(v["pid"] is None and v["state"] != GONE for v
                                       in st["seats"].values()):
                # a cell process still starting (importing): the first cell would share its cores
                return False
            return all(v["state"] != STARTING for v in st["seats"].values()
                       if v["index"] < self.index
                       or (v["index"] == self.index == 0 and v["side"] < self.side))

        with self.ring._locked() as st:
            st["seats"][self.id]["pid"] = os.getpid()
        self._wait(ready)

    def ready(self) -> None:
        """Set up; turns start when no seat of any side is still setting up."""
        self._set(RUNNING)

    def before(self, k: int) -> None:
        """Block until it is this seat's turn for iteration k."""
        self._wait(lambda st: _started(st) and _current(st) == self.id and st["round"] == k)

    def after(self, k: int) -> None:
        """Iteration k done: the next seat's turn."""
        self._set(RUNNING, advance=True)

    def leave(self, wait_for_others: bool = False) -> None:
        """No more turns for this seat (finished, failed, or found dead by its parent); idempotent.
        wait_for_others: then block until every seat of every side has left (no teardown while
        another cell is timed)."""
        self._set(GONE)  # its turn, if it held one, passes on (_skip_gone)
        if wait_for_others:
            self._wait(lambda st: all(s["state"] == GONE for s in st["seats"].values())
                       and len(st["registered"]) == st["sides"])
        if self._fifo is not None:
            os.close(self._fifo)
            self._fifo = None


class Pacer:
    """What a cell calls around its iterations; alone (no seat, the default) it never waits.
    waited_s: the seconds it has waited for set-up and turns (other cells' work, not its own:
    start-up excludes it)."""

    def __init__(self, seat: Seat | None = None):
        self.seat = seat
        self.waited_s = 0.0

    def _waiting(self, wait, *args) -> None:
        t = time.monotonic()
        wait(*args)
        self.waited_s += time.monotonic() - t

    def setup(self) -> None:
        if self.seat:
            self._waiting(self.seat.setup)

    def ready(self) -> None:
        if self.seat:
            self.seat.ready()

    def before(self, k: int) -> None:
        if self.seat:
            self._waiting(self.seat.before, k)

    def after(self, k: int) -> None:
        if self.seat:
            self.seat.after(k)

    def leave(self, wait_for_others: bool = False) -> None:
        if self.seat:
            self.seat.leave(wait_for_others)
