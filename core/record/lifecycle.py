"""What a cell costs outside its measured iterations, for `rlbench check --against`
(bench/check/lifecycle.py).

results.json `lifecycle` of a cell:
- `startup_s`: wall seconds from the cell process's start (its exec, or on CPU its fork from
  `rlbench run`'s fork server, whose modules are already imported: core/devices/starting.py; then
  imports, model build and warm start, the workers' start, the first evaluation, the warm-up
  iterations) to the start of its first measured iteration, less the seconds it waited in the turn
  ring (`ring_wait_s`: other cells' set-up and turns, which are not its own work).
- `startup_cpu_s`: CPU seconds the cell's processes (the cell process, its workers' fork server on
  CPU and every worker, with their own child processes) used up to that moment: the same span as
  work, steady while other processes share the cores.
- `process_cpu_s`: {process: CPU seconds from the start of the first measured iteration to the end
  of the last}: the stages' work and everything between and around them (the cell process's
  bookkeeping).
- `peak_rss_mb`: {process: peak resident set size in MB} of the cell process (`driver`) and every
  worker, read just before the workers close (Linux VmHWM; a worker's own child processes are added
  to it).
- `startup_phases`: {process: {phase: wall seconds}}: where start-up went, phase by phase (Phase
  below), each process timing its own with `phase` (a worker's come to the driver with its Ready
  message).
- `compile` (engine.compile on): {process: {compiles, recompiles, seconds}}: what torch.compile did
  in the trainer and each rollout worker up to the last iteration; the start-up's compilations are
  also the `compile` phase of `startup_phases`.
- `first_iteration_s`: wall seconds from the cell process's start to the start of its first
  iteration (a warm-up one or not), less its first evaluation and its waits in the turn ring: how
  long the cell takes to be ready to work (docs/results/startup.md).
Each evaluation (results.json `evals`) records its wall seconds (`wall_s`, its `eval` stage event)
and the CPU seconds of the cell's processes during it (`cpu_s`): the wall time of the first
evaluation, made while the other tree sets up the same cell, varied by more than 2x between
unchanged runs; its work did not. Read from /proc (Linux); what cannot be read is left out, never
guessed.
"""
from __future__ import annotations

import contextlib
import enum
import os
import time

from rlbench.core.devices import starting
from rlbench.core.record.hostcpu import cpu_seconds
from rlbench.core.record.stages import Role

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


class Phase(str, enum.Enum):
    """The phases of a cell's start-up, in the order they happen; a process records the ones it
    has."""

    # from the process's start (exec, or fork from a fork server) to its own code
    IMPORTS = "imports"
    DEVICE = "device"  # placement, pinning to the device, the accelerator's initialisation
    # driver: the policy built (a run's first cell) or mapped from the run's weight file
    MODEL = "model"
    # driver: from starting the worker processes to every one ready (their phases inside)
    WORKERS = "workers"
    # worker: its model copies built from the config with the weights in, on its device
    WEIGHTS = "weights_in"
    OPTIMIZER = "optimizer_ref"  # trainer rank: the reference model and the optimizer
    # engine.compile: a worker's compilations at start-up (engines/model/compiled.py)
    COMPILE = "compile"
    FIRST_EVAL = "first_eval"  # driver: the evaluation before the first iteration
    WARMUP = "warmup"  # driver: the warm-up iterations


# This process's phases, and those its workers reported (a forked process starts a new record).
_PHASES: dict = {"pid": None, "seconds": {}, "workers": {}}


def _own(part: str = "seconds") -> dict:
    if _PHASES["pid"] != os.getpid():
        _PHASES.update(pid=os.getpid(), seconds={}, workers={})
    return _PHASES[part]


def begin_phases(own_process: bool) -> None:
    """A new record of this process's phases (a cell starting in it); own_process: the process was
    started for the cell, so its age so far is its imports phase."""
    _own().clear()
    _own("workers").clear()
    if own_process:
        record_phase(Phase.IMPORTS, process_age_s() or 0.0)


def record_phase(name: Phase, seconds: float) -> None:
    """Add `seconds` to this process's phase (a phase entered twice counts both)."""
    seen = _own()
    seen[name.value] = round(seen.get(name.value, 0.0) + seconds, 3)


# per phase being timed in this thread of control: seconds of the phases inside it
_NESTED: list[float] = []


@contextlib.contextmanager
def phase(name: Phase):
    """Time a start-up phase of this process (wall seconds, the system-wide monotonic clock). A
    phase timed inside another (compile inside a worker's optimizer_ref or weights_in) counts as
    itself only: the outer phase's seconds leave it out, so the phases add up to the start-up."""
    t = time.monotonic()
    _NESTED.append(0.0)
    try:
        yield
    finally:
        took, inner = time.monotonic() - t, _NESTED.pop()
        record_phase(name, took - inner)
        if _NESTED:
            _NESTED[-1] += took


def phases() -> dict[str, float]:
    """This process's start-up phases so far: {phase: wall seconds}."""
    return dict(_own())


def add_workers(by_worker: dict[str, dict]) -> None:
    """The start-up phases the workers of this process reported once ready ({worker: {phase:
    seconds}})."""
    _own("workers").update(by_worker)


def by_process() -> dict[str, dict]:
    """{process: {phase: seconds}}: this process (the driver) and the workers it heard from."""
    return {Role.DRIVER.value: phases(), **_own("workers")}


def phase_totals(by_process: dict[str, dict]) -> dict[str, float]:
    """{phase: seconds of the slowest process in it} of a cell's `startup_phases`: the workers start
    side by side, so a phase takes as long as its slowest process."""
    out: dict[str, float] = {}
    for seconds in by_process.values():
        for name, s in seconds.items():
            out[name] = max(out.get(name, 0.0), s)
    return {p.value: out[p.value] for p in Phase if p.value in out}


class Lifecycle:
    """A cell's `lifecycle` record (results.json), filled in as the cell runs
    (bench/run/cell.py)."""

    def __init__(self):
        self.record: dict = {}
        self._at_start: dict[str, float | None] = {}

    def first_measured(self, waited_s: float, host_cpu) -> None:
        """At the start of the first measured iteration: start-up. waited_s: seconds the cell waited
        in the turn ring so far; host_cpu: core/record/hostcpu.py HostCPU of the cell's
        processes."""
        age, self._at_start = process_age_s(), host_cpu.totals()
        server = starting.server_pid()  # the workers' fork server: its imports are this cell's work
        used = list(self._at_start.values()) + ([cpu_seconds(server)] if server else [])
        self.record.update(startup_s=None if age is None else round(age - waited_s, 3),
                           ring_wait_s=round(waited_s, 3),
                           startup_cpu_s=None if None in used or not used else round(sum(used), 3))

    def first_iteration(self, waited_s: float, first_eval_s: float) -> None:
        """At the start of the first iteration (warm-up or not): `first_iteration_s`, less the first
        evaluation (first_eval_s) and the turn ring's waits (waited_s)."""
        age = process_age_s()
        if age is not None:
            self.record["first_iteration_s"] = round(age - waited_s - first_eval_s, 3)

    def add_phases(self, by_process: dict[str, dict]) -> None:
        """Processes' start-up phases ({process: {phase: seconds}}) into `startup_phases`."""
        self.record.setdefault("startup_phases",
                               {}).update({w: dict(p) for w, p in by_process.items() if p})

    def last_measured(self, host_cpu) -> None:
        """At the end of the last iteration (before its record and evaluation): each process's CPU
        seconds since the first measured iteration began, one difference (a tick of /proc each, not
        one per iteration)."""
        if self._at_start:
            now_ = host_cpu.totals()
            self.record["process_cpu_s"] = {w: round(now_[w] - t, 3)
                                            for w, t in self._at_start.items()
                                            if t is not None and now_.get(w) is not None}

    def compiled(self, train_stats: dict | None, rollout_stats: list | None) -> None:
        """engine.compile: `compile` {process: {compiles, recompiles, seconds}} so far, from the
        trainer's step stats and each rollout worker's (every process counts its own; the start-up's
        share is its phase)."""
        found = ({"trainer": train_stats["compile"]} if train_stats and "compile" in train_stats
                 else {})
        for i, stats in enumerate(rollout_stats or []):
            if isinstance(stats, dict) and "compile" in stats:
                found[f"rollout{i}"] = stats["compile"]
        if found:
            self.record["compile"] = found

    def peaks(self, pids: dict[str, int]) -> None:
        """Before the workers close: every process's peak memory (peaks below)."""
        self.record["peak_rss_mb"] = peaks(pids)


def eval_seconds(event, before: dict, after: dict) -> dict:
    """An evaluation's wall seconds (its stage event) and the CPU seconds every process of the cell
    spent in it (HostCPU totals before and after: the evaluator runs on a worker, not in the
    recording thread)."""
    cpu = [after[w] - t for w, t in before.items() if t is not None and after.get(w) is not None]
    return {"wall_s": round(event.duration, 4) if event else None,
            "cpu_s": round(sum(cpu), 3) if cpu else None}


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
    """{process: peak RSS in MB} of the driver (its own: its children are the workers) and of every
    worker with its descendants (a vLLM engine core counts with the worker that started it, as for
    host CPU)."""
    out = {}
    for w, pid in pids.items():
        own = peak_rss_mb(pid)
        if own is None:
            continue
        kids = [] if w == Role.DRIVER.value else [peak_rss_mb(c) or 0.0 for c in _children(pid)]
        out[w] = round(own + sum(kids), 1)
    return out
