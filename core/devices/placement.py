"""Which process holds which physical device (docs/architecture/placement.md: the comparison must be
fair).

A device is a GPU, an NPU, or on CPU one core. Every worker process holds whole devices, pinned,
with one intra-op thread per CPU core:

- the colocated layout (VERL's hybrid engine): one colocated worker per device; each generates and
  trains its shard of the iteration, gradients are all-reduced (data parallel).
- the pools layout: a rollout pool (one worker per device) and a training pool (one
  data-parallel trainer rank per device). The pools take disjoint devices unless
  `engine.share_devices` says they share them (one GPU); then they occupy max(rollout, train)
  devices.

The run never claims more devices than the machine has, and TPSPD divides by the physical devices
the run occupies (`Placement.devices`), the same for every schedule. The driver process dispatches
and evaluates; it holds no device of the run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rlbench.core import schedules
from rlbench.core.errors import UserError
from rlbench.core.record.stages import Role


@dataclass(frozen=True)
class Slot:
    """One worker process and the device it holds."""

    worker: str  # colocated0, rollout1, trainer0, ...
    role: str  # a Role value
    # device index: the core on CPU (position in the affinity mask), cuda:i / npu:i otherwise
    index: int
    kind: str  # cpu | cuda | npu
    threads: int  # intra-op threads (1 per CPU core; 1 on accelerators)

    @property
    def device(self) -> str:
        return f"{self.kind}:{self.index}"

    def record(self) -> dict:
        """What results.json's `placement` holds for this process."""
        return {"worker": self.worker, "role": self.role, "device": self.device,
                "threads": self.threads}


@dataclass
class Placement:
    slots: list[Slot]
    devices: int  # physical devices occupied: the TPSPD divisor
    kind: str
    # worker -> what it observed (engines/launch.py checks it)
    observed: dict = field(default_factory=dict)
    # Ray: node -> its clock's offset from the driver's, estimated during the run
    # (core/record/clocks.py)
    clocks: dict = field(default_factory=dict)

    def of(self, role: Role) -> list[Slot]:
        return [s for s in self.slots if s.role == role.value]

    def records(self) -> list[dict]:
        """One entry per process, the driver included (it holds no device), each with what it
        observed."""
        driver = {"worker": Role.DRIVER.value, "role": Role.DRIVER.value, "device": None,
                  "threads": 1}
        return [{**r,
                 "observed": self.observed.get(r["worker"])} for r
                in [s.record() for s in self.slots] + [driver]]


def claimable(engine, local: int) -> int:
    """The devices a run may claim: this machine's `local` ones, or on a running Ray cluster
    (engine.ray_address) what it asks for: the cluster's nodes are checked one by one before the run
    (core/devices/cluster.py, engines/ray_nodes.py)."""
    return engine.num_devices if engine.launcher == "ray" and engine.ray_address else local


def plan(engine, kind: str, available: int) -> Placement:
    """Slots for the config's schedule on `available` devices of `kind`; refuses
    oversubscription."""
    n = engine.num_devices  # both schedules of a comparison occupy the same
    if n > available:
        what = "cores" if kind == "cpu" else f"{kind} devices"
        shared = " (with engine.share_devices: max of the two)" if engine.share_devices else ""
        raise UserError(
            f"engine.rollout_devices={engine.rollout_devices} + "
            f"engine.train_devices={engine.train_devices} ask for {n} devices{shared}, but this "
            f"machine has {available} {what}. Lower them, or set "
            "engine.share_devices=true to let the rollout and training pools share devices (e.g. "
            "one GPU).")

    if schedules.SCHEDULES[engine.schedule].colocated:
        slots = [Slot(f"{Role.COLOCATED.value}{i}", Role.COLOCATED.value, i, kind,
                      1) for i in range(n)]
    else:
        r, t = engine.rollout_devices, engine.train_devices
        first_train = 0 if engine.share_devices else r
        slots = [Slot(f"{Role.ROLLOUT.value}{i}", Role.ROLLOUT.value, i, kind, 1) for i in range(r)]
        slots += [Slot(f"{Role.TRAINER.value}{i}", Role.TRAINER.value, first_train + i, kind,
                       1) for i in range(t)]
    return Placement(slots, n, kind)


def single_process(engine, kind: str, available: int) -> Placement:
    """The old colocated layout (one process; the schedule record's `in_process`), kept as a named
    variant for comparison: one process with every device, n intra-op threads on CPU."""
    n = engine.num_devices  # both schedules of a comparison occupy the same
    plan(engine, kind, available)  # the same device check
    return Placement([Slot("colocated", Role.COLOCATED.value, 0, kind, n if kind == "cpu" else 1)],
                     n, kind)
