"""Interleaved cells (bench/run/interleave.py): the turn order is cell 0, 1, 2 per iteration, no iteration
starts before every cell is set up, a cell that leaves (done or dead) passes its turns on, and no
cell tears down before all have left. Two sides (the two trees of `rlbench check --against`) take
turns cell by cell, the side that goes first alternating by iteration. Threads stand in for the cell
processes (the same ring folder, FIFOs and lock)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from rlbench.run.interleave import GONE, Pacer, Ring, Seat


def _cell(seat, iterations, log, die_at=None, tag=None):
    p = Pacer(seat)
    p.setup()
    name = tag(seat) if tag else (seat.index if seat else 0)
    log.append(("setup", name))
    p.ready()
    for k in range(iterations):
        p.before(k)
        if k == die_at:
            log.append(("died", name, k))
            p.leave()  # what the parent does for a dead child (and run_cell's finally does for a failed one)
            return
        log.append(("it", name, k))
        p.after(k)
    p.leave(wait_for_others=True)
    log.append(("teardown", name))


def _threads(seats, iterations, log, die=None, tag=None):
    threads = [threading.Thread(target=_cell, args=(s, iterations, log, (die or {}).get(s.id), tag))
               for s in reversed(seats)]  # started in the "wrong" order on purpose
    for t in threads:
        t.start()
    return threads


def _join(threads, log):
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), log


def _run(tmp_path, n, iterations, die=None):
    seats, log = Ring.create(tmp_path / "ring").register(0, [f"c{i}" for i in range(n)]), []
    _join(_threads(seats, iterations, log, {f"s0c{i}": k for i, k in (die or {}).items()}), log)
    return log


def test_round_robin_after_every_setup(tmp_path):
    log = _run(tmp_path, 3, 3)
    assert log[:3] == [("setup", 0), ("setup", 1), ("setup", 2)]  # one after the other, in order
    its = [e for e in log if e[0] == "it"]
    assert its == [("it", i, k) for k in range(3) for i in range(3)]
    first_teardown = min(j for j, e in enumerate(log) if e[0] == "teardown")
    assert first_teardown > max(j for j, e in enumerate(log) if e[0] == "it")


def test_a_dead_cell_passes_its_turns_on(tmp_path):
    log = _run(tmp_path, 3, 3, die={1: 1})
    its = [e for e in log if e[0] in ("it", "died")]
    assert its == [("it", 0, 0), ("it", 1, 0), ("it", 2, 0), ("it", 0, 1), ("died", 1, 1), ("it", 2, 1),
                   ("it", 0, 2), ("it", 2, 2)]


def test_alone_never_waits():
    log = []
    _cell(None, 2, log)
    assert [e[0] for e in log] == ["setup", "it", "it", "teardown"]


def test_two_sides_alternate_cell_by_cell(tmp_path):
    """Old and new tree: iteration k of a cell runs on both sides back to back, old first on even k,
    new first on odd k (ABBA), and nothing starts before both sides are set up."""
    ring = Ring.create(tmp_path / "ring", sides=2)
    log = []
    tag = lambda s: f"{'AB'[s.side]}{s.index}"  # noqa: E731
    a = ring.register(0, ["sync", "async"])
    threads = _threads(a, 3, log, tag=tag)
    time.sleep(0.5)  # the second tree registers later (CI's race): nothing of the first sets up before it does
    assert not log
    b = ring.register(1, ["sync", "async"])
    _join(threads + _threads(b, 3, log, tag=tag), log)
    setups = [e[1] for e in log if e[0] == "setup"]
    assert setups[:2] == ["A0", "B0"] and set(setups[2:]) == {"A1", "B1"}  # A0 warms the cache, then by index
    its = [(e[1], e[2]) for e in log if e[0] == "it"]
    assert its == [("A0", 0), ("B0", 0), ("A1", 0), ("B1", 0),
                   ("B0", 1), ("A0", 1), ("B1", 1), ("A1", 1),
                   ("A0", 2), ("B0", 2), ("A1", 2), ("B1", 2)]


def test_the_first_cell_sets_up_once_every_cell_process_has_started(tmp_path):
    """Side B's cell processes reach their set-up late (still importing): A0 must not set up meanwhile, or
    its start-up shares the cores with their imports and B0's does not."""
    ring = Ring.create(tmp_path / "ring", sides=2)
    log = []
    tag = lambda s: f"{'AB'[s.side]}{s.index}"  # noqa: E731
    a, b = ring.register(0, ["sync", "async"]), ring.register(1, ["sync", "async"])
    threads = _threads(a, 1, log, tag=tag)
    time.sleep(1.0)  # B's processes have not reached set-up yet
    assert not any(e[0] == "setup" for e in log), log
    _join(threads + _threads(b, 1, log, tag=tag), log)
    assert [e[1] for e in log if e[0] == "setup"][:2] == ["A0", "B0"]


def test_an_abandoned_side_does_not_block_the_other(tmp_path):
    ring = Ring.create(tmp_path / "ring", sides=2)
    log = []
    threads = _threads(ring.register(0, ["sync", "async"]), 2, log)
    ring.abandon(1)  # the other tree's `rlbench run` failed before it registered its cells
    _join(threads, log)
    assert [(e[1], e[2]) for e in log if e[0] == "it"] == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_a_seat_whose_process_died_is_passed(tmp_path):
    """A cell process killed without its parent noticing (a whole tree killed): found by its pid."""
    ring = Ring.create(tmp_path / "ring")
    s0, s1 = ring.register(0, ["a", "b"])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    with ring._locked() as st:
        st["seats"][s1.id].update(pid=int(dead), state="running")
    log = []
    _join(_threads([s0], 2, log), log)
    assert [(e[1], e[2]) for e in log if e[0] == "it"] == [(0, 0), (0, 1)]
    assert json.loads((ring.folder / "state.json").read_text())["seats"][s1.id]["state"] == GONE


def test_a_seat_closing_its_fifo_during_a_wake_up_is_no_error(tmp_path, monkeypatch):
    """A cell that leaves closes its FIFO; another seat waking everyone may have opened that FIFO just
    before: its write then meets no reader (EPIPE). That is nothing to wake, not a failed cell (it failed
    whole cells after their last iteration, with BrokenPipeError, when two cells finished together)."""
    ring = Ring.create(tmp_path / "ring")
    s0, s1 = ring.register(0, ["a", "b"])
    reader = os.open(ring.folder / f"{s1.id}.fifo", os.O_RDONLY | os.O_NONBLOCK)  # s1 waiting on it
    real_open, closed = os.open, []

    def open_then_reader_leaves(path, flags, *a):
        fd = real_open(path, flags, *a)
        if str(path).endswith(f"{s1.id}.fifo") and flags & os.O_WRONLY and not closed:
            os.close(reader)  # s1 leaves between the waker's open and its write
            closed.append(path)
        return fd

    monkeypatch.setattr(os, "open", open_then_reader_leaves)
    s0.leave()  # wakes every seat
    assert closed, "the wake-up never opened s1's FIFO: the race was not staged"
    assert json.loads((ring.folder / "state.json").read_text())["seats"][s0.id]["state"] == GONE


def test_seats_pickle_as_folder_and_numbers(tmp_path):
    import pickle

    seat = Ring.create(tmp_path / "ring").register(1, ["x"])[0]
    again = pickle.loads(pickle.dumps(seat))
    assert (again.ring.folder, again.side, again.index, again.id) == (seat.ring.folder, 1, 0, "s1c0")
    assert isinstance(again, Seat)


def test_a_ring_of_another_protocol_is_refused(tmp_path):
    from rlbench.core.errors import UserError
    from rlbench.run import interleave

    ring = Ring.create(tmp_path / "ring", sides=2)
    state = json.loads((ring.folder / "state.json").read_text())
    (ring.folder / "state.json").write_text(json.dumps({**state, "protocol": interleave.PROTOCOL - 1}))
    with pytest.raises(UserError, match=f"protocol {interleave.PROTOCOL - 1}, this tree {interleave.PROTOCOL}"):
        ring.register(1, ["sync"])
