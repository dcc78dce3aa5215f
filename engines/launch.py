"""How a worker process is started on its device, and how what it observed is checked against the
plan.

One place decides each worker's device and makes it true for every library in the process
(docs/architecture/placement.md): an accelerator worker is started with only its device visible
(CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES in the environment the process is created with, so
nothing in it, the built-in engine, vLLM or Ray, can initialise another device), and inside it that
device is index 0. A CPU worker is pinned to its core by affinity after it starts
(core/devices/device.py `pin`).

- `start_env(slot)`: the variables a local worker process is created with (engines/hosts.py
  ProcessHost).
- `child_slot(slot)`: the slot the worker itself gets (accelerator index 0: the only one it sees).
- `ray_options(slot, sharing)`: the Ray actor's resources; Ray sets the visible device of the GPU
  (or NPU) it assigns before the actor's constructor runs.
- `expected(slot, ...)` / `check(...)`: what a worker must observe (affinity, threads, visible
  devices); a mismatch is a WorkerError (exit 3) that shows the plan and the observation side by
  side.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import threading

import torch

from rlbench.core.devices import cluster
from rlbench.core.devices import device as dev
from rlbench.core.devices import peak
from rlbench.core.errors import WorkerError
from rlbench.core.results import provenance as prov
from rlbench.engines.ray_util import actor_resources

_ENV_LOCK = threading.Lock()  # os.environ is the template of every process started while it is held


def start_env(slot, environ=None) -> dict[str, str]:
    """The environment variables a local worker process holding `slot` is created with (none on
    CPU)."""
    return dev.visible_env(slot.kind, slot.index, environ)


def child_slot(slot):
    """The slot as the worker sees it: an accelerator worker sees one device, its index 0."""
    return slot if slot.kind == "cpu" else dataclasses.replace(slot, index=0)


@contextlib.contextmanager
def environment(env: dict[str, str]):
    """os.environ with `env` laid over it while a process is started (a spawned process copies the
    parent's environment when it is created); restored afterwards."""
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def ray_options(slot, sharing: int = 1, placement: dict | None = None) -> dict:
    """Ray resources of one worker actor: its cores on CPU; on an accelerator 1/sharing of one
    device (engine.share_devices puts a rollout worker and a trainer rank on one GPU: each asks for
    half); and where engine.placement names its node, a sliver of that node's resource
    (core/devices/cluster.py)."""
    res = actor_resources(slot.kind, slot.threads)
    if slot.kind == "cuda":
        res["num_gpus"] = 1 / sharing
    elif slot.kind == "npu":
        res["resources"] = {"NPU": 1 / sharing}
    where = cluster.node_of(placement or {}, slot)
    if where:
        res["resources"] = {**res.get("resources", {}), where: cluster.PLACEMENT_SHARE}
    return res


def sharing(slots) -> dict[str, int]:
    """worker -> how many workers of these slots plan to hold its device."""
    counts: dict[str, int] = {}
    for s in slots:
        counts[s.device] = counts.get(s.device, 0) + 1
    return {s.worker: counts[s.device] for s in slots}


def expected(slot, environ=None, cores: list[int] | None = None, exact_device: bool = True) -> dict:
    """What a worker holding `slot` must observe: its intra-op threads; on CPU its one core (the
    core at position `index` of the driver's affinity mask); on an accelerator exactly the visible
    device start_env gives it (exact_device) or, under Ray (which picks the device), one visible
    device."""
    out: dict = {"threads": slot.threads}
    if slot.kind == "cpu":
        cores = dev.cpu_cores() if cores is None else cores
        if slot.threads == 1:  # single_process sync keeps every core
            out["affinity"] = [cores[slot.index % len(cores)]]
        return out
    var = dev.VISIBLE_ENV[slot.kind]
    out["visible"] = start_env(slot, environ)[var] if exact_device else "one device"
    return out


def mismatches(want: dict, got: dict | None) -> list[str]:
    """The keys where an observation differs from the expectation, as 'key: planned X, observed
    Y'."""
    if got is None:
        return ["nothing observed"]
    out = []
    for key, value in want.items():
        seen = got.get(key)
        ok = (seen is not None and len([d for d in str(seen).split(",") if d.strip()]) == 1
              if value == "one device" else seen == value)
        if not ok:
            out.append(f"{key}: planned {value!r}, observed {seen!r}")
    return out


def check(placement, observed: dict[str, dict], exact_device: bool = True, environ=None,
          cores: list[int] | None = None) -> None:
    """WorkerError (exit 3) when any worker observed other than the plan, naming each worker, what
    was planned and what it observed. Slots planned on one device must observe one device, and slots
    on different devices different ones (checked by visible device, which Ray assigns itself)."""
    problems = []
    for slot in placement.slots:
        bad = mismatches(expected(slot, environ, cores, exact_device), observed.get(slot.worker))
        if bad:
            problems.append(f"  {slot.worker} (planned {slot.device}, {slot.threads} thread(s)): "
                            + "; ".join(bad))
    if not problems and placement.kind != "cpu":
        problems += _shared_as_planned(placement, observed)
    if problems:
        raise WorkerError("placement mismatch: the workers were not given what the plan says:\n"
                          + "\n".join(problems))


def _shared_as_planned(placement, observed: dict[str, dict]) -> list[str]:
    """Workers planned on the same device see the same one; on different devices, different ones."""
    seen: dict[str, str] = {}
    for slot in placement.slots:
        key = f"{observed[slot.worker].get('node', '')}/{observed[slot.worker].get('visible')}"
        seen.setdefault(slot.device, key)
        if seen[slot.device] != key:
            return [f"  {slot.worker}: planned on {slot.device} with other workers but observed "
                    f"device {key}"]
    keys = list(seen.values())
    if len(set(keys)) != len(keys):
        return [f"  workers planned on different devices observed the same one: {seen}"]
    return []


def provenance(schedule, device, dtype) -> dict:
    """results.json's provenance with the device's description and measured peak
    (core/devices/peak.py) taken where the device is: on the trainer's rank 0 when the trainer runs
    in workers (the driver holds no accelerator), else in this process."""
    info = prov.collect(None)
    on_worker = getattr(schedule.trainer, "device_facts", None)
    if on_worker is not None:
        info["device"], info["peak"] = on_worker(dtype)
    else:
        info["device"], info["peak"] = dev.describe(device), peak.peak(device, dtype)
    info["cpu_threads"] = info["device"]["torch_threads"]
    return info


def observe_driver() -> dict:
    """What the driver holds: its cores and threads, and whether it initialised an accelerator (it
    must not)."""
    out = {"affinity": dev.cpu_cores(), "threads": torch.get_num_threads(),
           "cuda_initialized": bool(torch.cuda.is_initialized())}
    npu = getattr(torch, "npu", None)
    if npu is not None and hasattr(npu, "is_initialized"):
        out["npu_initialized"] = bool(npu.is_initialized())
    return out
