"""How busy the device was during a stage: the busy seconds the timer records beside the wall
seconds (core/record/stages.py; docs/architecture/timer.md says why each clock).

- CPU (and the driver, which holds no device): the recording thread's CPU seconds
  (`time.thread_time`). A worker's work runs on that thread (one intra-op thread per device,
  core/devices/device.py `set_threads`); the process's CPU time would also count its other threads
  (a colocated asynchronous worker's rollout producer, the heartbeat), which are not the stage's
  work. Time the thread waits (a sleep, a queue, a core held by another process) is not busy.
- CUDA: the GPU's utilisation samples from NVML (`nvmlDeviceGetSamples`, GPU_UTILIZATION_SAMPLES:
  the share of each sample period, ~1/6 s on recent data-centre GPUs, in which at least one kernel
  ran), averaged over the samples taken during the stage, times its wall seconds. Not CUDA events:
  the timer synchronises before and after every stage, so the elapsed time between two events on the
  stream is the stage's wall time again, gaps between kernels included. Not the profiler's kernel
  time: exact, but it records every launch and is kept for `--profile`. NVML costs one library call
  per stage and needs no Python package (the driver's libnvidia-ml, through ctypes). Its limits: it
  is the whole GPU's (another process's kernels on the same GPU count), and a stage shorter than a
  sample period has no sample (busy None: not measured).
- NPU and other devices: not measured (None).
"""
from __future__ import annotations

import ctypes
import os
import time
import uuid

NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_SUCCESS, NVML_ERROR_NOT_FOUND = 0, 6


class _Sample(ctypes.Structure):
    # nvmlSample_t: unsigned long long timeStamp (µs, the host's real-time clock), nvmlValue_t (an
    # 8-byte union)
    _fields_ = [("timestamp", ctypes.c_ulonglong), ("value", ctypes.c_ulonglong)]


def busy_seconds(samples: list[tuple[int, float]], start_us: int, end_us: int,
                 wall_s: float) -> float | None:
    """Utilisation samples (timestamp µs, percent) -> busy seconds of a stage from start_us to
    end_us of wall_s seconds: the mean of the samples taken inside it, times wall_s; None without
    one."""
    inside = [pct for ts, pct in samples if start_us < ts <= end_us]
    if not inside:
        return None
    return wall_s * min(100.0, sum(inside) / len(inside)) / 100.0


class CpuClock:
    """Busy = the recording thread's CPU seconds over the stage (the timer reads them anyway)."""

    kind = "cpu"

    def busy(self, cpu_s: float, start_unix: float, end_unix: float) -> float | None:
        return cpu_s


class NvmlClock:
    """Busy = NVML's GPU utilisation averaged over the stage's samples, times its wall seconds."""

    kind = "gpu"

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle

    def busy(self, cpu_s: float, start_unix: float, end_unix: float) -> float | None:
        start_us, end_us = int(start_unix * 1e6), int(end_unix * 1e6)
        return busy_seconds(self.samples(start_us), start_us, end_us, end_unix - start_unix)

    def samples(self, since_us: int) -> list[tuple[int, float]]:
        """(timestamp µs, percent) of the samples NVML holds taken after since_us ([] on any
        error)."""
        kind, count = ctypes.c_int(), ctypes.c_uint(0)
        get = self.lib.nvmlDeviceGetSamples
        rc = get(self.handle, NVML_GPU_UTILIZATION_SAMPLES, ctypes.c_ulonglong(since_us),
                 ctypes.byref(kind),
                 ctypes.byref(count), None)
        if rc != NVML_SUCCESS or count.value == 0:
            return []
        buf = (_Sample * count.value)()
        rc = get(self.handle, NVML_GPU_UTILIZATION_SAMPLES, ctypes.c_ulonglong(since_us),
                 ctypes.byref(kind),
                 ctypes.byref(count), buf)
        if rc != NVML_SUCCESS:
            return []
        return [(s.timestamp, _value(s.value, kind.value)) for s in buf[:count.value]]


def _value(raw: int, kind: int) -> float:
    """nvmlValue_t's bytes as the number NVML says it holds (0 double, 1 unsigned int, 5 signed int,
    6 unsigned short, else a 64-bit integer); the union is little-endian on every NVML platform."""
    if kind == 0:
        return ctypes.c_double.from_buffer_copy(raw.to_bytes(8, "little")).value
    return float(raw & {1: 0xFFFFFFFF, 5: 0xFFFFFFFF, 6: 0xFFFF}.get(kind, 0xFFFFFFFFFFFFFFFF))


def clock(device):
    """The busy clock of a Recorder's device: CpuClock for the CPU and the driver (None); NvmlClock
    for a CUDA device where NVML answers; None (not measured) elsewhere."""
    if device is None or device.type == "cpu":
        return CpuClock()
    if device.type == "cuda":
        return _nvml_clock(device)
    return None


def _nvml_clock(device):
    """NvmlClock of the GPU `device` is; None where NVML cannot be loaded or does not know the
    GPU."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != NVML_SUCCESS:
            return None
        handle = _handle(lib, device)
    except (OSError, AttributeError, RuntimeError, ValueError, AssertionError):
        return None
    return NvmlClock(lib, handle) if handle is not None else None


def _handle(lib, device):
    """NVML's handle of the GPU `device` is, matched by UUID: CUDA_VISIBLE_DEVICES (a pinned
    worker's) renumbers CUDA's devices, not NVML's. Without a match: NVML's device of the same index
    where CUDA sees every GPU (no CUDA_VISIBLE_DEVICES), else None."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    want = _uuid_text(getattr(torch.cuda.get_device_properties(device), "uuid", None))
    count = ctypes.c_uint(0)
    if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != NVML_SUCCESS:
        return None
    for i in range(count.value):
        handle, buf = ctypes.c_void_p(), ctypes.create_string_buffer(96)
        if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != NVML_SUCCESS:
            continue
        if lib.nvmlDeviceGetUUID(handle, buf,
                                 96) == NVML_SUCCESS and _uuid_text(buf.value.decode()) == want:
            return handle
    index = device.index if device.index is not None else torch.cuda.current_device()
    if os.environ.get("CUDA_VISIBLE_DEVICES") is None and index < count.value:
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == NVML_SUCCESS:
            return handle
    return None


def _uuid_text(u) -> str | None:
    """A GPU UUID as lower-case hex with dashes, without NVML's "GPU-" prefix (torch gives it as an
    object with the raw bytes, or as text)."""
    if u is None:
        return None
    text = str(uuid.UUID(bytes=bytes(u.bytes))) if hasattr(u, "bytes") else str(u)
    return text.lower().removeprefix("gpu-")


def now_unix() -> float:
    """The real-time clock NVML stamps its samples with, in seconds."""
    return time.time()

