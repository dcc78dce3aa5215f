"""VERL's platform interface answered for CPU cores: VERL 0.9.1 registers NVIDIA, Ascend and ROCm
platforms only and falls back to NVIDIA where none is found
(verl/plugin/platform/platform_manager.py:117).

A device is one CPU core, as everywhere in rlbench. Ray holds the run's devices as logical GPUs
(VERL's resource pools ask Ray for "GPU": verl/single_controller/ray/base.py:230 counts GPU or NPU
only), so an actor holding one sees its device's index in CUDA_VISIBLE_DEVICES, and `pin` puts the
process on that core with one intra-op thread. Collectives run over gloo; tensors never leave host
memory, so memory calls answer with nothing to do and CUDA-IPC weight transfer is off (VERL then
sends weights through shared memory).
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from rlbench.engines.external.verl.names import CORES_ENV

NAME = "cpu"
DEVICE_ENV = "CUDA_VISIBLE_DEVICES"  # what Ray sets for an actor holding logical GPUs


class CpuDevice:
    """What VERL calls on `torch.cuda` (through get_torch_device()), answered on the CPU:
    torch.cpu's own functions, and the calls torch.cpu lacks (memory, RNG, IPC, device name) as the
    host has them."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def current_device(self) -> str:
        # torch.cpu.current_device's answer; `.to(get_device_id())` then stays on the host
        return "cpu"

    def set_device(self, index) -> None:
        pin(index)

    def synchronize(self, index=None) -> None:
        """Host work is done when the call returns."""

    def empty_cache(self) -> None:
        """No caching allocator on the host."""

    def ipc_collect(self) -> None:
        """No CUDA IPC handles to collect."""

    def set_per_process_memory_fraction(self, *args, **kwargs) -> None:
        """No device memory to cap."""

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_rng_state(self, *args, **kwargs):
        return torch.get_rng_state()

    def set_rng_state(self, state, *args, **kwargs) -> None:
        torch.set_rng_state(state)

    def get_device_name(self, *args, **kwargs) -> str:
        # VERL's own name for the host: its MFU then uses its CPU peak
        # (verl/utils/flops_counter.py:23)
        return "CPU"

    def mem_get_info(self, *args, **kwargs) -> tuple[int, int]:
        pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return pages * size, os.sysconf("SC_PHYS_PAGES") * size

    def memory_allocated(self, *args, **kwargs) -> int:
        return 0  # device memory: there is none; VERL logs host memory beside it

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    def reset_peak_memory_stats(self, *args, **kwargs) -> None:
        """Nothing counted."""


@PlatformRegistry.register(platform=NAME)
class PlatformCPU(PlatformBase):
    """VERL's PlatformBase for CPU cores (the methods are VERL's; the answers are the host's)."""

    device_name = NAME
    vendor_name = NAME
    device_module = CpuDevice()

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:
        return self.device_module.current_device()

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        pin(device_index)

    def synchronize(self, device_index=None) -> None:
        """Host work is done when the call returns."""

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """No caching allocator on the host."""

    def empty_cache(self) -> None:
        """No caching allocator on the host."""

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return DEVICE_ENV

    @contextmanager
    def nvtx_range(self, msg: str):
        yield  # no device profiler ranges on the host

    def profiler_start(self) -> None:
        """No device profiler."""

    def profiler_stop(self) -> None:
        """No device profiler."""

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []  # Ray sets CUDA_VISIBLE_DEVICES: that is how an actor learns its core

    def is_ipc_supported(self) -> bool:
        return False  # no CUDA IPC: VERL's bucketed weight transfer uses shared memory

    def cudart(self):
        return None


def run_cores() -> list[int]:
    """The run's cores in device order (RLBENCH_VERL_CORES), or the cores this process may use."""
    text = os.environ.get(CORES_ENV, "")
    return [int(c) for c in text.split(",") if c.strip()] or sorted(os.sched_getaffinity(0))


def pin(device_index=None) -> int | None:
    """Pins this process to its device's core with one intra-op thread, as rlbench pins its own
    workers. The device is `device_index`, or the one Ray gave this actor (CUDA_VISIBLE_DEVICES
    naming one logical GPU); a process holding no device (VERL's driver, agent-loop and reward
    workers) is left on the run's cores. -> the core, or None."""
    if device_index is None or not str(device_index).isdigit():
        visible = [d for d in os.environ.get(DEVICE_ENV, "").split(",") if d.strip()]
        if len(visible) != 1 or not visible[0].isdigit():
            return None
        device_index = visible[0]
    cores = run_cores()
    core = cores[int(device_index) % len(cores)]
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    # vLLM's CPU worker binds its threads by this
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    return core
