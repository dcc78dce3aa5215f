"""One Stage enum and one timer. Every timing in rlbench is a StageEvent from `Recorder.stage`."""
from __future__ import annotations

import contextlib
import enum
import time
from dataclasses import dataclass

from rlbench.core import hooks
from rlbench.core.devices import busy as busy_clock
from rlbench.core.devices import device as dev
from rlbench.core.record import progress


class Stage(str, enum.Enum):
    ROLLOUT = "rollout"
    REWARD = "reward"
    OLD_LOGPROB = "old_logprob"
    REF_LOGPROB = "ref_logprob"
    ADVANTAGE = "advantage"
    UPDATE = "update"
    OPTIMIZER_STEP = "optimizer_step"
    WEIGHT_SYNC = "weight_sync"
    # Ray, a rollout worker on another node than the published weights: fetching their bytes over
    # the link (before its weight_sync, which then only loads them)
    WEIGHT_TRANSFER = "weight_transfer"
    # Ray, recorded by the driver for a group sealed on another node: from its sealing (the rollout
    # worker's clock, mapped to the driver's) to its arrival at the driver
    GROUP_TRANSFER = "group_transfer"
    QUEUE_WAIT = "queue_wait"
    HANDOFF = "handoff"  # the consumer opening a group taken off the queue: the queue path's work
    EVAL = "eval"
    # The rollout workers of a schedule that runs ahead, held between two iterations
    # (engines/rollout/gate.py): recorded by the driver from the gate's closing to its opening;
    # outside every iteration's window.
    PAUSED = "paused"


# Stages that are not work: a worker in them is idle (bubble).
IDLE_STAGES = {Stage.QUEUE_WAIT.value}
# Stages that are not part of any iteration's work or window: measurement, and the held gap between
# iterations.
OUTSIDE_STAGES = {Stage.EVAL.value, Stage.PAUSED.value}
# The training stages of an iteration (what "train time" means everywhere: metrics, predictions,
# checks): the per-sample ones, whose cost grows with the trained tokens, and the optimizer step,
# once per iteration.
PER_SAMPLE_TRAIN_STAGES = (Stage.REWARD.value, Stage.OLD_LOGPROB.value, Stage.REF_LOGPROB.value,
                           Stage.ADVANTAGE.value, Stage.UPDATE.value)
TRAIN_STAGES = (*PER_SAMPLE_TRAIN_STAGES, Stage.OPTIMIZER_STEP.value)


class Role(str, enum.Enum):
    """What a worker process does; its events are recorded as worker `<role><i>` (the driver:
    `driver`)."""

    COLOCATED = "colocated"  # colocated layout: rollout and training of one shard on one device
    ROLLOUT = "rollout"  # pools layout: the rollout pool
    TRAINER = "trainer"  # pools layout: a data-parallel trainer rank
    DRIVER = "driver"  # dispatches, hands groups on, evaluates; holds no device of the run
    EVAL = "eval"


def role_of(worker: str) -> str:
    """'rollout0' -> 'rollout'; names without an index are their own role."""
    return worker.rstrip("0123456789")


class _NodeClock:
    """This process's clock mapped to the driver's. On one machine every process reads the same
    system-wide monotonic clock and both numbers stay 0. On a Ray node other than the driver's, the
    driver measures how far this node's clock is from its own (engines/ray_clock.py) and sets
    `offset`; `skew` is a test hook's planted error of this node's clock (bench/planted/faults.py),
    0 otherwise."""

    skew = 0.0  # seconds this node's clock runs ahead of CLOCK_MONOTONIC (planted only)
    offset = 0.0  # seconds this node's clock is ahead of the driver's, as last estimated
    # this process runs on another node than the driver (what it sends crosses the link)
    elsewhere = False


NODE_CLOCK = _NodeClock()


def node_now() -> float:
    """This node's own monotonic clock (what a clock probe reads: engines/ray_clock.py)."""
    return time.monotonic() + NODE_CLOCK.skew


def now() -> float:
    """The run's clock: the driver's monotonic clock (CLOCK_MONOTONIC on Linux, comparable across
    the processes of one machine), a remote node's mapped onto it."""
    return time.monotonic() + NODE_CLOCK.skew - NODE_CLOCK.offset


@dataclass
class StageEvent:
    worker: str
    stage: str
    iteration: int
    start: float  # seconds since the run's t0
    end: float
    devices: int = 1  # devices this worker occupies
    # CPU seconds of the recording thread during the stage (where the work runs: one intra-op thread
    # per worker). Unlike wall time it does not grow while another process holds the core, so stage
    # costs compared by `rlbench check` stay steady on a shared machine; None for events from
    # elsewhere.
    cpu: float | None = None
    # Seconds the device was busy during the stage (core/devices/busy.py): on CPU the thread's CPU
    # seconds (= cpu), on CUDA NVML's utilisation over the stage times its wall seconds; None: not
    # measured.
    busy: float | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


class Recorder:
    """Records (worker, stage, iteration, start, end) events with a device sync at both ends.

    Events go to `sink` (a callable taking a StageEvent) as they finish, so nothing waits for the
    end of the run to be written.
    """

    def __init__(self, worker: str, t0: float, device=None, devices: int = 1, sink=None):
        self.worker, self.t0, self.device, self.devices = worker, t0, device, devices
        self.events: list[StageEvent] = []
        self.sink = sink
        # [stage, iteration, start, cpu, unix start] of the stages being timed
        self._open: list[list] = []
        self._busy = busy_clock.clock(device)  # None: the device's busy time is not measured
        # entered(stage, k) / left(stage, k) around every stage: a profiling window
        self.watcher = None

    @contextlib.contextmanager
    def stage(self, stage: Stage, iteration: int):
        # the hang watchdog's sign of progress (core/record/progress.py)
        progress.enter(stage.value, iteration)
        if self.device is not None:
            dev.synchronize(self.device)
        if self.watcher is not None:
            self.watcher.entered(stage.value, iteration)
        opened = [stage, iteration, now(), time.thread_time(), busy_clock.now_unix()]
        self._open.append(opened)
        # the driver (no device): record_function only
        ctx = dev.range_context(f"{stage.value}", self.device)
        try:
            with ctx:
                yield
                if self.device is not None:
                    dev.synchronize(self.device)
                _, _, start, cpu, _ = opened  # a suspend() inside moved them
                hooks.call("stage_end", stage.value, now() - start, time.thread_time() - cpu,
                           # a planted slowdown (RLBENCH_SLOW) burns here
                           stage.value in IDLE_STAGES)
        finally:
            self._open.remove(opened)
        ev = self._close(opened)
        if self.watcher is not None:
            self.watcher.left(stage.value, iteration)
        progress.leave(stage.value, ev.duration)

    def suspend(self, wait) -> None:
        """Run wait() outside the innermost open stage: its event ends here and a new one of the
        same stage starts when wait() returns, so a held rollout worker's waiting is in no stage
        (engines/rollout/gate.py)."""
        if not self._open:
            wait()
            return
        opened = self._open[-1]
        if self.device is not None:
            dev.synchronize(self.device)
        self._close(opened)
        wait()
        opened[2:] = now(), time.thread_time(), busy_clock.now_unix()

    def _close(self, opened: list) -> StageEvent:
        """The event of an open stage [stage, iteration, start, cpu, unix start], ending now: its
        wall, CPU and busy seconds."""
        stage, iteration, start, cpu0, unix0 = opened
        end, cpu = now(), time.thread_time() - cpu0
        return self.add(stage, iteration, start, end, cpu,
                        self.busy(cpu, unix0, busy_clock.now_unix()))

    def busy(self, cpu_s: float, start_unix: float, end_unix: float) -> float | None:
        """The device's busy seconds over a span (the thread's CPU seconds, the wall clock's Unix
        ends; core/devices/busy.py), for a stage timed outside stage(); None: not measured."""
        return self._busy.busy(cpu_s, start_unix, end_unix) if self._busy is not None else None

    def add(self, stage: Stage, iteration: int, start: float, end: float, cpu: float | None = None,
            busy: float | None = None) -> StageEvent:
        ev = StageEvent(self.worker, Stage(stage).value, iteration, start - self.t0, end - self.t0,
                        self.devices, cpu, busy)
        self.extend([ev])
        return ev

    def extend(self, events: list[StageEvent]) -> None:
        """Events another recorder made (a data-parallel rank's), kept and sunk like this one's."""
        for ev in events:
            self.events.append(ev)
            if self.sink is not None:
                self.sink(ev)

    def drain(self) -> list[StageEvent]:
        out, self.events = self.events, []
        return out

