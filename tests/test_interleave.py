"""Interleaved cells (bench/interleave.py): the turn order is cell 0, 1, 2 per iteration, no iteration
starts before every cell is set up, a cell that leaves (done or dead) passes its turns on, and no
cell tears down before all have left. Threads stand in for the cell processes (same primitives)."""
from __future__ import annotations

import multiprocessing as mp
import threading

from rlbench.interleave import Pacer, Turns


def _cell(turns, i, iterations, log, die_at=None):
    p = Pacer(turns, i)
    p.setup()
    log.append(("setup", i))
    p.ready()
    for k in range(iterations):
        p.before(k)
        if k == die_at:
            log.append(("died", i, k))
            p.leave()  # what the parent does for a dead child (and run_cell's finally does for a failed one)
            return
        log.append(("it", i, k))
        p.after(k)
    p.leave(wait_for_others=True)
    log.append(("teardown", i))


def _run(n, iterations, die=None):
    turns, log = Turns(mp.get_context("spawn"), n), []
    threads = [threading.Thread(target=_cell, args=(turns, i, iterations, log, (die or {}).get(i)))
               for i in reversed(range(n))]  # started in the "wrong" order on purpose
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), log
    return log


def test_round_robin_after_every_setup():
    log = _run(3, 3)
    assert log[:3] == [("setup", 0), ("setup", 1), ("setup", 2)]  # one after the other, in order
    its = [e for e in log if e[0] == "it"]
    assert its == [("it", i, k) for k in range(3) for i in range(3)]
    first_teardown = min(j for j, e in enumerate(log) if e[0] == "teardown")
    assert first_teardown > max(j for j, e in enumerate(log) if e[0] == "it")


def test_a_dead_cell_passes_its_turns_on():
    log = _run(3, 3, die={1: 1})
    its = [e for e in log if e[0] in ("it", "died")]
    assert its == [("it", 0, 0), ("it", 1, 0), ("it", 2, 0), ("it", 0, 1), ("died", 1, 1), ("it", 2, 1),
                   ("it", 0, 2), ("it", 2, 2)]


def test_alone_never_waits():
    log = []
    _cell(None, 0, 2, log)
    assert [e[0] for e in log] == ["setup", "it", "it", "teardown"]
