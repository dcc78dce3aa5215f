"""`--seeds` in parallel, where that keeps one device per worker: cells of different seeds at once,
each on CPU cores no other cell uses.

A cell places its workers on the cores of its own affinity mask (device.cpu_cores, placement.plan),
one worker per core. So the cores are cut into slots of a cell's size (engine.num_devices) and each
cell process starts with its slot as its mask: no two workers of any cells share a core. A slot runs
the cells of one seed in order (seed-major, as the sequential loop), then takes the next seed. With
fewer than two slots (2 cores and cells of 2 devices: the CPU default) the cells run one after the
other, as before. Accelerators (cuda, npu) stay sequential: a cell takes every visible device.

Cells running side by side share memory bandwidth and caches, which a sequential run does not: their
TPSPD is not comparable with a sequential run's (compare cells of one run, or seeds with seeds).
"""
from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from rlbench.core.devices import device
from rlbench.core.errors import UserError
from rlbench.core.results import schema


def core_slots(cfgs, cores: list[int] | None = None) -> list[list[int]]:
    """Disjoint core groups, one cell each; [] when fewer than two fit or a cell is not on the
    CPU."""
    if any(device.resolve_kind(c.engine.device) != "cpu" for c in cfgs):
        return []
    cores = device.cpu_cores() if cores is None else cores
    per = max(c.engine.num_devices for c in cfgs)
    slots = [cores[i * per:(i + 1) * per] for i in range(len(cores) // per)]
    return slots if len(slots) >= 2 else []


def parallel_plan(todo) -> list[list[int]]:
    """The slots to run `todo` ([(entry, (cell, cfg, seed))]) on, or [] to run it sequentially: only
    for two or more seeds (cells that take turns never come here: bench/run/ablation.py
    `takes_turns`)."""
    cfgs = [cfg for _, (_, cfg, _) in todo]
    seeds = {seed for _, (_, _, seed) in todo}
    if len(seeds) < 2:
        return []
    return core_slots(cfgs)


@dataclass
class CellProcess:
    """How the ablation runs one cell process (bench/run/ablation.py's own functions, passed in)."""

    main: Callable  # the process target: (config json, folder, name, progress channel)
    start: Callable  # start it as the leader of its process group
    reap: Callable  # after it ended: end what is left of its group
    interrupt: Callable  # Ctrl-C: pass SIGINT to the cells still running


def run_parallel(ctx, todo, record: dict, run_dir, board, slots: list[list[int]],
                 cp: CellProcess) -> dict:
    """Run the seeds' queues of cells on the slots, a thread per slot starting and joining cell
    processes; exit codes go into record and ablation.json as they come (under a lock); board
    (bench/run/board.py): the run's progress lines."""

    queues: dict = defaultdict(list)
    for item in todo:
        queues[item[1][2]].append(item)
    pending = list(queues.values())
    lock = threading.Lock()
    procs: list = []

    def slot_worker(cores: list[int]) -> None:
        while True:
            with lock:
                if not pending:
                    return
                queue = pending.pop(0)
            for entry, (cell, cfg, _) in queue:
                proc = ctx.Process(target=cp.main, name=f"rlbench-cell-{cell}",
                                   args=(cfg.model_dump(mode="json"), str(run_dir / entry["dir"]),
                                         cell,
                                         board.open(cell)))
                # the child inherits the mask it is started with; the parent's is restored
                with lock:
                    mask = os.sched_getaffinity(0)
                    os.sched_setaffinity(0, cores)
                    try:
                        cp.start(proc)
                    finally:
                        os.sched_setaffinity(0, mask)
                    board.started(cell)
                    procs.append(proc)
                    # ablation.json: the physical cores this cell ran on
                    entry["cores"] = list(cores)
                proc.join()
                cp.reap(proc)
                with lock:
                    entry["exit_code"] = proc.exitcode
                    board.ended(cell, proc.exitcode)
                    schema.atomic_write_json(run_dir / schema.ABLATION, record)

    threads = [threading.Thread(target=slot_worker, args=(s,), daemon=True) for s in slots]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        cp.interrupt([p for p in procs if p.is_alive()])
        raise
    rejected = [e["name"] for e, _ in todo if e["exit_code"] == 2]
    if rejected:
        raise UserError(f"cells {', '.join(rejected)} rejected their input (see the errors above)")
    return record
