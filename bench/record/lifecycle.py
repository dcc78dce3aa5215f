"""What a cell costs outside its measured iterations, for `rlbench check --against` (bench/check/lifecycle.py).

results.json `lifecycle` of a cell:
- `startup_s`: wall seconds from the cell process's start (exec of the interpreter: imports, model build and
  warm start, the workers' start, the first evaluation, the warm-up iterations) to the start of its first
  measured iteration, less the seconds it waited in the turn ring (`ring_wait_s`: other cells' set-up and
  turns, which are not its own work).
- `startup_cpu_s`: CPU seconds the cell's processes (the cell process and every worker, with their own
  child processes) used up to that moment: the same span as work, steady while other processes share the cores.
- `peak_rss_mb`: {process: peak resident set size in MB} of the cell process (`driver`) and every worker,
  read just before the workers close (Linux VmHWM; a worker's own child processes are added to it).
The evaluations' wall seconds are their `eval` stage events (and each evals entry's `wall_s`).
Read from /proc (Linux); what cannot be read is left out, never guessed.
"""
from __future__ import annotations

import os
import time

from rlbench.record.hostcpu import cpu_seconds
from rlbench.record.stages import Role

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_age_s(pid: int | None = None) -> float | None:
    """Seconds since the process started; None where /proc or CLOCK_BOOTTIME is missing. The kernel
    counts a process's start time in clock ticks since boot, the clock CLOCK_BOOTTIME reads."""
    try:
        with open(f"/proc/{pid or os.getpid()}/stat") as f:
            text = f.read()
        started = int(text[text.rindex(")") + 2:].split()[19]) / _TICK  # field 22: starttime
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, AttributeError):
        return None


def startup(waited_s: float, pids: dict[str, int]) -> dict:
    """The `startup_*` fields at the start of the first measured iteration. waited_s: seconds this cell
    waited in the turn ring so far; pids: {process: pid} of the cell's processes (the driver: this one)."""
    age = process_age_s()
    used = [cpu_seconds(p, with_children=w != Role.DRIVER.value) for w, p in pids.items()]
    return {"startup_s": None if age is None else round(age - waited_s, 3), "ring_wait_s": round(waited_s, 3),
            "startup_cpu_s": None if None in used or not used else round(sum(used), 3)}


def peak_rss_mb(pid: int) -> float | None:
    """Peak resident set size of one process (VmHWM), in MB; None when /proc does not show it."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _children(pid: int) -> list[int]:
    """Every live descendant of pid."""
    parents = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
            parents[int(name)] = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [c for c, p in parents.items() if p == parent]
        out += kids
        todo += kids
    return out


def peaks(pids: dict[str, int]) -> dict[str, float]:
    """{process: peak RSS in MB} of the driver (its own: its children are the workers) and of every worker
    with its descendants (a vLLM engine core counts with the worker that started it, as for host CPU)."""
    out = {}
    for w, pid in pids.items():
        own = peak_rss_mb(pid)
        if own is None:
            continue
        kids = [] if w == Role.DRIVER.value else [peak_rss_mb(c) or 0.0 for c in _children(pid)]
        out[w] = round(own + sum(kids), 1)
    return out
