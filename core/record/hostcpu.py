"""Host CPU, measured: CPU seconds of every process of a cell per iteration, the driver included.

On CPU a device is a core, and the driver is a process on the same cores that TPSPD does not count
as a device; on an accelerator every worker also spends host CPU launching work. Each iteration
records, per process, the CPU seconds (user + system, all threads) it used between the iteration's
start and end: `host_cpu_s` (worker -> seconds; a worker's own child processes, e.g. vLLM's engine
core, count with it) and `host_cpu_pct` (the driver's CPU seconds over the iteration's wall time, in
% of one core). Read from /proc (Linux); a process that cannot be read there (a Ray actor on another
node, not Linux) is left out.
"""
from __future__ import annotations

import os
import time

from rlbench.core.record.stages import Role

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int, with_children: bool = False, table: dict | None = None) -> float | None:
    """utime + stime of `pid` (and of its live descendants), in seconds; None when /proc lacks
    it."""
    own = _stat(pid)
    if own is None:
        return None
    total = own[1]
    if with_children:
        table = _table() if table is None else table
        todo = [pid]
        while todo:
            parent = todo.pop()
            for child, (ppid, cpu) in table.items():
                if ppid == parent:
                    total += cpu
                    todo.append(child)
    return total


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of one process from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid ... utime stime
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def _table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds) of every process /proc shows."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            out[int(name)] = st
    return out


class HostCPU:
    """Per-iteration CPU seconds of the driver (this process) and of every worker process (pids)."""

    def __init__(self, pids: dict[str, int]):
        self.pids = {Role.DRIVER.value: os.getpid(), **{w: p for w, p in pids.items() if p}}
        self._start: dict[str, float | None] = {}
        self._t = 0.0

    def totals(self) -> dict[str, float | None]:
        """CPU seconds of each process since it started (a worker's live children with it); None:
        unreadable."""
        table = _table() if len(self.pids) > 1 else {}
        return {w: cpu_seconds(p, with_children=w != Role.DRIVER.value, table=table)
                for w, p in self.pids.items()}

    def start(self) -> None:
        self._start, self._t = self.totals(), time.perf_counter()

    def stop(self) -> dict:
        """-> {"host_cpu_s": worker -> CPU seconds since start(), "host_cpu_pct": the driver's % of
        a core}."""
        wall = time.perf_counter() - self._t
        end = self.totals()
        used = {w: round(end[w] - self._start[w], 4) for w in self.pids
                if end.get(w) is not None and self._start.get(w) is not None}
        driver = used.get(Role.DRIVER.value)
        pct = 100.0 * driver / wall if driver is not None and wall > 0 else None
        return {"host_cpu_s": used, "host_cpu_pct": pct}
