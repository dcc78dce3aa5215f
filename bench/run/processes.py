"""A cell's process: `cell_main` (-> `run_cell`, bench/run/cell.py) started as the leader of its own
process group, Ctrl-C passed on to it, and what is left of its group reaped after it; and every cell
at once, taking turns by iteration (run.interleave, bench/run/interleave.py).
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
from multiprocessing.connection import wait
from pathlib import Path

from rlbench import experiments
from rlbench.core.config import RunConfig
from rlbench.core.devices import procs, starting
from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.run import board as boards
from rlbench.run import interleave
from rlbench.run.interleave import Pacer


def start(proc) -> None:
    """Start a cell process as the leader of its own process group (it also does so itself:
    whichever comes first; the parent cannot once the child has exec'd)."""
    proc.start()
    try:
        os.setpgid(proc.pid, proc.pid)
    except OSError:
        pass


def interrupt(cell_procs) -> None:
    """Ctrl-C reached `rlbench run` (the terminal's foreground group): pass it to every cell's
    group, as the terminal would have, and give the cells time to save their results."""
    for proc in cell_procs:
        procs.forward(signal.SIGINT, proc.pid)
    for proc in cell_procs:
        proc.join(30)


def reap(proc) -> None:
    """After a cell process ended (or would not): end what is left of its process group (a vLLM
    engine core that outlived its worker, a resource tracker), checked in /proc, within about 10
    s."""
    if proc.is_alive():
        proc.kill()
        proc.join(5)
    left = procs.end_group(proc.pid)
    if left:
        print(f"warning: processes of cell {proc.name} still alive after 10 s: "
              f"{procs.describe(left)}",
              file=sys.stderr)


def ring_seats(cells, run_dir: Path):
    """Seats for the cells in a turn ring: the one RLBENCH_RING names (a side of `rlbench check
    --against`), else a new ring of this run alone. -> (seats, ring folder to remove at the end or
    None)."""
    shared = interleave.from_env()
    if shared:
        folder, side = shared
        return interleave.Ring(folder).register(side, [c for c, _, _ in cells]), None
    folder = Path(tempfile.mkdtemp(prefix="rlbench-ring-"))
    return interleave.Ring.create(folder).register(0, [c for c, _, _ in cells]), folder


def run_interleaved(ctx, cells, entries: list[dict], record: dict, run_dir: Path, board) -> dict:
    """Every cell in its own process at once, taking turns by iteration (bench/run/interleave.py);
    board (bench/run/board.py): the run's progress lines."""
    seats, own = ring_seats(cells, run_dir)
    running = {}
    try:
        for seat, entry, (cell, cfg, _) in zip(seats, entries, cells):
            proc = ctx.Process(target=cell_main, name=f"rlbench-cell-{cell}",
                               args=(cfg.model_dump(mode="json"), str(run_dir / entry["dir"]), cell,
                                     board.open(cell), seat))
            start(proc)
            board.started(cell)
            running[proc.sentinel] = (seat, proc, entry)
        while running:
            for sentinel in wait(list(running)):
                seat, proc, entry = running.pop(sentinel)
                proc.join()
                reap(proc)
                seat.leave()  # a cell that died mid-turn passes its turns on
                entry["exit_code"] = proc.exitcode
                board.ended(entry["name"], proc.exitcode)
                schema.atomic_write_json(run_dir / schema.ABLATION, record)
    except KeyboardInterrupt:
        interrupt([proc for _, proc, _ in running.values()])
        for seat, proc, entry in running.values():
            entry["exit_code"] = 130
        schema.atomic_write_json(run_dir / schema.ABLATION, record)
        raise
    finally:
        for seat, proc, _ in running.values():
            reap(proc)
            seat.leave()
        if own:
            shutil.rmtree(own, ignore_errors=True)
    rejected = [e["name"] for e in record["cells"] if e["exit_code"] == 2]
    if rejected:
        raise UserError(f"cell(s) {', '.join(rejected)} rejected their input (see the error above)")
    return record


def cell_main(cfg_json: dict, folder: str, name: str, progress, seat=None) -> None:
    """A cell process; progress: its channel to the run's progress lines (bench/run/board.py), or
    None. It leads its own process group, so that whatever it starts (workers, vLLM engine cores,
    resource trackers) can be found and ended after it (core/devices/procs.py); it gets SIGTERM when
    `rlbench run` dies, ends like a Ctrl-C, and then takes what is left of its group with it."""
    # inside: it imports torch; `rlbench run`, which starts this process, must not
    from rlbench.run.cell import run_cell

    # before anything prints: its standard error may go to the board
    progress = boards.attach(progress)
    # forked by `rlbench run`'s fork server (on CPU): it must end with `rlbench run`
    starting.detach()
    procs.lead_own_group()
    procs.interruptible()
    procs.stop_group_on_sigterm()  # a polite stop, as Ctrl-C: results saved, workers closed
    procs.die_with_parent(signal.SIGTERM)
    try:
        cfg, runner = RunConfig.model_validate(cfg_json), experiments.runner_of(name)
        # a cell an experiment runs itself (a peer framework's: bench/experiments/<name>/)
        if runner:
            runner(cfg, Path(folder), name, progress, Pacer(seat))
        else:
            run_cell(cfg, Path(folder), name, progress=progress, pacer=Pacer(seat),
                     own_process=True)
    except KeyboardInterrupt:
        sys.exit(130)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except BaseException as e:  # noqa: BLE001 - result already written with status failed
        print(f"error in cell {name}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(3)
    finally:
        # orphaned: nobody else will clean up
        if os.getppid() != multiprocessing.parent_process().pid:
            procs.kill_group(os.getpgid(0), spare=os.getpid())
