"""The machine's peak, measured: what one device can do at best, the yardstick of per-stage
utilisation.

Three probes on one device with the threads one rlbench worker gets (CPU: one core, one intra-op
thread):
- matmul: a square matmul in the run's dtype, best of several; 2 n^3 FLOPs each -> peak FLOP/s.
- copy: copying a buffer far larger than the caches, best of several; read + write bytes -> peak
  B/s.
- launch: a chain of tiny ops recorded by autograd, forward then backward, best of several; seconds
  per op -> what the host pays to issue one op of a training step, the floor of a step made of many
  small ones (engine.shared_prompt=auto weighs it, core/costmodel/packing.py).
- host copy (accelerators only): a buffer copied into shared host memory and back, best of several;
  bytes per second of one crossing -> what publishing weights to a rollout worker on another process
  costs (the trainer's weights go to shared host tensors, the worker loads them onto its device),
  which the speedup prediction needs and a colocated sync rank's on-device copy cannot show.
- attention (asked for by engine.shared_prompt=auto, per head width): a causal attention's forward
  and backward through SDPA at the model's head_dim, best of several; 4 H Dh L^2 / 2 FLOPs a
  forward, the backward twice that -> FLOP/s. The kernel runs its softmax beside the two matmuls, so
  at narrow heads it reaches a fraction of the matmul's peak (a 2-core AMD EPYC, one thread: about a
  third at head_dim 16, a half at 64), which a pass with long prompts spends most of its time in.
They are what a stage can reach with the same library on the same device (a practical peak, not the
datasheet's), so a stage at 80% of it is close to the hardware limit. The result is cached per
device name, threads, dtype and torch version with the load it was measured under (`rlbench env
--remeasure` measures again); one measured while every CPU was taken is measured again once the
machine is quieter, each probe keeping its better value.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rlbench.core.devices import device as dev

# Probe sizes: big enough to leave the caches and amortise dispatch, small enough for a few seconds.
MATMUL_N = {"cpu": 512, "accel": 8192}
COPY_BYTES = {"cpu": 256 << 20, "accel": 2 << 30}
HOST_COPY_BYTES = 512 << 20
REPEATS = 5
LAUNCH_OPS = 200  # ops in the launch probe's chain (forward; as many again in its backward)
# the attention probe's (length L, heads x head_dim)
ATTENTION = {"cpu": (1024, 512), "accel": (4096, 4096)}


def cache_path() -> Path:
    root = os.environ.get("RLBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "rlbench")
    return Path(root) / "peak.json"


def _best(fn, sync, repeats: int) -> float:
    fn()  # warm-up
    sync()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def measure(device, dtype, threads: int = 1) -> dict:
    """-> {matmul_flops_per_s, copy_bytes_per_s, launch_s_per_op, host_copy_bytes_per_s (None on a
    CPU), probe sizes} on `device` with `threads` intra-op threads."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    kind = "cpu" if device.type == "cpu" else "accel"
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    try:
        n = MATMUL_N[kind]
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        mm_s = _best(lambda: a @ b, lambda: dev.synchronize(device), REPEATS)
        numel = COPY_BYTES[kind] // 4
        src = torch.ones(numel, device=device)
        dst = torch.empty_like(src)
        copy_s = _best(lambda: dst.copy_(src), lambda: dev.synchronize(device), REPEATS)
        del src, dst
        launch = launch_s_per_op(device, dtype)
        host = host_copy_bytes_per_s(device)
    finally:
        torch.set_num_threads(before)
    return {"matmul_flops_per_s": 2 * n ** 3 / mm_s, "copy_bytes_per_s": 2 * numel * 4 / copy_s,
            "launch_s_per_op": launch, "host_copy_bytes_per_s": host, "matmul_n": n,
            "copy_bytes": numel * 4,
            "dtype": str(dtype).replace("torch.", ""),
            "threads": threads if device.type == "cpu" else None}


def launch_s_per_op(device, dtype) -> float:
    """Seconds the host spends per op of a training step: LAUNCH_OPS multiplications of an 8-element
    tensor recorded by autograd, then their backward (one op each), best of REPEATS, over 2 x
    LAUNCH_OPS."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    x = torch.ones(8, device=device, dtype=dtype, requires_grad=True)

    def chain():
        y = x
        for _ in range(LAUNCH_OPS):
            y = y * 1.0001
        y.sum().backward()
    return _best(chain, lambda: dev.synchronize(device), REPEATS) / (2 * LAUNCH_OPS)


def host_copy_bytes_per_s(device) -> float | None:
    """Bytes per second of one crossing between `device` and shared host memory: HOST_COPY_BYTES
    copied to a shared-memory CPU tensor (what a trainer's publish writes) and back (a rollout
    worker's load), best of REPEATS, over both crossings. None on a CPU, where the weights never
    leave host memory."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    if device.type == "cpu":
        return None
    numel = HOST_COPY_BYTES // 4
    on_device = torch.ones(numel, device=device)
    host = torch.empty(numel).share_memory_()

    def round_trip():
        host.copy_(on_device)
        on_device.copy_(host)
    return 2 * numel * 4 / _best(round_trip, lambda: dev.synchronize(device), REPEATS)


def attention_flops_per_s(device, dtype, head_dim: int) -> float:
    """FLOP/s of a causal attention's forward + backward (SDPA) with heads of `head_dim`, best of
    REPEATS."""
    import torch  # inside: instant path: `rlbench --help` imports this module
    import torch.nn.functional as F  # inside: as above

    length, width = ATTENTION["cpu" if device.type == "cpu" else "accel"]
    heads = max(1, width // head_dim)
    q, k, v = (torch.randn(1, heads, length, head_dim,
                           device=device).to(dtype).requires_grad_() for _ in range(3))
    grad = torch.ones(1, heads, length, head_dim, device=device, dtype=dtype)

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
    return 3 * 4 * heads * head_dim * length * length / 2 / _best(step,
                                                                  lambda: dev.synchronize(device),
                                                                  REPEATS)


def _load() -> float | None:
    """The machine's 1-minute load average per CPU (None where the OS does not say)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return None


def _busier(entry: dict) -> bool:
    """Whether a cached peak was measured on a machine busier than it is now: every CPU taken (load
    per CPU >= 1) when it is not now. Such a probe shares the cores with whatever ran then, and one
    cached on a busy machine once read 4.8 GFLOP/s where the same cores give 139 when quiet (a 29x
    error in every utilisation and in engine.shared_prompt=auto's seconds)."""
    then, now = entry.get("load"), _load()
    return then is not None and now is not None and then >= 1.0 > now


def _best_of(old: dict, new: dict) -> dict:
    """Each probe's better value of two measurements (a peak only ever reads low), the newer's
    load."""
    best = {**new, "matmul_flops_per_s": max(old["matmul_flops_per_s"], new["matmul_flops_per_s"]),
            "copy_bytes_per_s": max(old["copy_bytes_per_s"], new["copy_bytes_per_s"])}
    if "launch_s_per_op" in old:
        best["launch_s_per_op"] = min(old["launch_s_per_op"], new["launch_s_per_op"])
    if old.get("host_copy_bytes_per_s") and new.get("host_copy_bytes_per_s"):
        best["host_copy_bytes_per_s"] = max(old["host_copy_bytes_per_s"],
                                            new["host_copy_bytes_per_s"])
    return best


def _key(device, dtype, threads: int) -> tuple[str, str]:
    import torch  # inside: instant path: `rlbench --help` imports this module

    info = dev.describe(device)
    name = info.get("name") or info.get("cpu") or device.type
    return f"{name}|{device.type}|threads={threads}|{dtype}|torch={torch.__version__}", name


def _read() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _write(cache: dict) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: measured every time, still correct


def attention_peak(device, dtype, head_dim: int, threads: int = 1) -> float:
    """The attention probe's FLOP/s at this head width, cached beside the device's peak (peak()
    first)."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    peak(device, dtype, threads)
    key, _ = _key(device, dtype, threads)
    cache = _read()
    entry = cache.setdefault(key, {}).setdefault("attention", {})
    old = entry.get(str(head_dim))
    if old is None or _busier(old):  # measured on a busier machine: again, keeping the better
        before = torch.get_num_threads()
        if device.type == "cpu":
            torch.set_num_threads(threads)
        try:
            new = attention_flops_per_s(device, dtype, head_dim)
        finally:
            torch.set_num_threads(before)
        entry[str(head_dim)] = {"flops_per_s": max(new, old["flops_per_s"] if old else 0.0),
                                "load": _load(),
                                "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}
        _write(cache)
    return entry[str(head_dim)]["flops_per_s"]


def peak(device, dtype, threads: int = 1, remeasure: bool = False) -> dict:
    """The cached peak of this device (measured now when not cached or when remeasure)."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    key, name = _key(device, dtype, threads)
    cache = _read()
    if remeasure or key not in cache or _busier(cache[key]):
        new = {**measure(device, dtype, threads), "device": name, "load": _load(),
               "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}
        cache[key] = new if remeasure or key not in cache else _best_of(cache[key], new)
    elif "launch_s_per_op" not in cache[key] or "host_copy_bytes_per_s" not in cache[key]:
        # cached before the launch or host-copy probe existed: add what is missing alone
        before = torch.get_num_threads()
        if device.type == "cpu":
            torch.set_num_threads(threads)
        try:
            if "launch_s_per_op" not in cache[key]:
                cache[key]["launch_s_per_op"] = launch_s_per_op(device, dtype)
            cache[key]["host_copy_bytes_per_s"] = host_copy_bytes_per_s(device)
        finally:
            torch.set_num_threads(before)
    else:
        return cache[key]
    _write(cache)
    return cache[key]
