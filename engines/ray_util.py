"""Ray helpers shared by every Ray-hosted worker (engines/hosts.py, the Ray rollout pool)."""
from __future__ import annotations

import logging
import os
import re
import signal
import time
import warnings
from pathlib import Path

import torch

from rlbench.core.errors import UserError, WorkerError


def actor_error(ray, e: BaseException, worker: str, doing: str) -> WorkerError:
    """A Ray failure of `worker` as a WorkerError: a constructor that raised, a dead actor, an
    exception."""
    exc = ray.exceptions
    if isinstance(e, exc.RayActorError):
        if "creation task" in str(e):
            return WorkerError(f"{worker} failed while {doing}:\n{plain(e)}")
        return WorkerError(f"{worker} died while {doing} (Ray actor died: {first_line(e)})")
    if isinstance(e, exc.RayTaskError):
        return WorkerError(f"{worker} failed while {doing}:\n{plain(e)}")
    return WorkerError(f"{worker} failed while {doing}: {type(e).__name__}: {e}")


def wait_exited(pids: list[int], timeout_s: float) -> None:
    """Wait until the actor processes `pids` have ended, SIGKILL those left after timeout_s. Only
    processes of this machine whose command line still names an rlbench actor count (a pid on
    another node, or one reused since, is not ours)."""
    deadline = time.monotonic() + timeout_s
    while (alive := [p for p in pids if _is_actor(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _is_actor(pid: int) -> bool:
    try:
        return b"_RayWorker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def ensure_ray(address: str | None, devices: int, device_kind: str) -> bool:
    """Start (or attach to) the Ray session the run's actors need; -> whether this call started
    it."""
    try:
        # inside: optional dependency (ray)
        import ray
        import ray.util.queue  # noqa: F401
    except ImportError:
        raise UserError("engine.launcher=ray needs Ray: pip install 'rlbench[ray]'") from None
    if ray.is_initialized():
        return False
    init_ray(ray, address, None, devices, device_kind)
    return True


def init_ray(ray, address: str | None, num_cpus: int | None, devices: int,
             device_kind: str) -> None:
    """Attach to `address`, or start a local instance with enough CPUs for the actors (`devices` on
    CPU)."""
    quiet = dict(log_to_driver=False, logging_level=logging.WARNING)
    if address:
        attach(ray, address)
        return
    need = devices if device_kind == "cpu" else 0
    # address="local": always a fresh instance, never a `ray start` cluster that happens to run
    # here.
    ray.init(address="local", num_cpus=max(num_cpus or os.cpu_count() or 1, need),
             include_dashboard=False,
             **quiet)


def attach(ray, address: str) -> None:
    """ray.init on a running cluster; one that cannot be reached is bad input (exit 2), named."""
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UserError(
            f"engine.ray_address={address}: cannot attach to a Ray cluster there: {e}"
        ) from None


def actor_resources(device_kind: str, share: int) -> dict:
    """Ray resources of one rollout actor: its cores on CPU, one accelerator (and a core)
    otherwise."""
    if device_kind == "cpu":
        return {"num_cpus": share}
    if device_kind == "cuda":
        return {"num_cpus": 1, "num_gpus": 1}
    if device_kind == "npu":
        return {"num_cpus": 1, "resources": {"NPU": 1}}
    raise UserError(f"engine.launcher=ray: no Ray placement for device '{device_kind}' (allowed: "
                    f"cpu, cuda, npu)")


def forwarded_env() -> dict:
    """The driver's RLBENCH_* variables (e.g. RLBENCH_FAULT) reach the actors, also on an attached
    cluster."""
    env = {k: v for k, v in os.environ.items() if k.startswith("RLBENCH_")}
    return {"env_vars": env} if env else {}


class RemoteWeights:
    """Published weights in the object store of the node that put them: [their reference] (in a
    list, so that a worker handed it fetches them itself, inside its timed stage)."""

    def __init__(self, refs: list):
        self.refs = refs


def fetch(refs: list) -> dict:
    """The weights behind [reference], here: their bytes cross from the node that holds them (if
    another)."""
    import ray  # inside: optional dependency (ray)

    return from_numpy(ray.get(refs[0]))


# numpy has no bfloat16: such tensors travel as int16 bit patterns and are viewed back on arrival.
_VIEW_AS = {"bfloat16": "int16"}


def to_numpy(weights: dict) -> dict:
    """name -> tensor (any device) => name -> (numpy array on CPU, torch dtype name)."""
    out = {}
    for n, t in weights.items():
        dtype = str(t.dtype).removeprefix("torch.")
        t = t.detach().to("cpu")
        if dtype in _VIEW_AS:
            t = t.view(getattr(torch, _VIEW_AS[dtype]))
        out[n] = (t.numpy(), dtype)
    return out


def from_numpy(state: dict) -> dict:
    """Inverse of to_numpy, without a copy: the tensors alias the (read-only) object-store
    buffers."""
    out = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for n, (a, dtype) in state.items():
            t = torch.from_numpy(a)
            out[n] = t.view(getattr(torch, dtype)) if dtype in _VIEW_AS else t
    return out


def plain(e: BaseException) -> str:
    """Ray's error text without its terminal colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(e))


def first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in plain(e).splitlines() if ln.strip()]
    return " ".join(lines[:2])[:300] if lines else type(e).__name__
