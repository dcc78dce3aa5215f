"""All CPU/CUDA/NPU branching lives here (STYLE.md 6)."""
from __future__ import annotations

import contextlib
import os


def resolve(kind: str = "cpu"):
    """'cpu' | 'cuda' | 'npu' | 'auto' -> torch.device. torch_npu is imported only when asked for."""
    import torch

    if kind == "auto":
        if torch.cuda.is_available():
            kind = "cuda"
        else:
            try:
                import torch_npu  # noqa: F401
                kind = "npu" if torch.npu.is_available() else "cpu"
            except ImportError:
                kind = "cpu"
    if kind == "npu":
        import torch_npu  # noqa: F401
    if kind == "cuda" and not torch.cuda.is_available():
        from rlbench.errors import UserError
        raise UserError("engine.device=cuda but no CUDA device is visible (allowed here: cpu, auto)")
    return torch.device(kind)


def synchronize(device) -> None:
    """Wait for queued device work, so a clock read after it measures finished work."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)


def range_context(name: str, device):
    """Profiler range: record_function everywhere, plus NVTX on CUDA and MSTX on NPU."""
    import torch

    stack = contextlib.ExitStack()
    stack.enter_context(torch.profiler.record_function(name))
    if device.type == "cuda":
        stack.enter_context(torch.cuda.nvtx.range(name))
    elif device.type == "npu":  # pragma: no cover - needs an Ascend NPU
        try:
            import torch_npu
            stack.enter_context(torch_npu.npu.mstx.range(name))
        except (ImportError, AttributeError):
            pass
    return stack


def set_threads(n: int) -> None:
    """On CPU a device is a core: a worker with n devices uses n intra-op threads."""
    import torch

    torch.set_num_threads(max(1, n))
    os.environ["OMP_NUM_THREADS"] = str(max(1, n))


def describe(device) -> dict:
    import platform

    import torch

    info = {"type": device.type, "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        info["name"] = torch.cuda.get_device_name(device)
        info["count"] = torch.cuda.device_count()
    return info
