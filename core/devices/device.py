"""All CPU/CUDA/NPU branching lives here (docs/architecture/devices.md)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import resource
import shutil
import subprocess

from rlbench.core.errors import UserError


def resolve(kind: str = "cpu", index: int | None = None):
    """'cpu' | 'cuda' | 'npu' | 'auto' -> torch.device; `index` picks one accelerator (cuda:i,
    npu:i).

    torch_npu is imported only when asked for. On CPU the index is a core (see `pin`), not part of
    the torch device."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    kind = resolve_kind(kind)
    if kind == "npu" and not _npu_available():
        raise UserError("engine.device=npu but no Ascend NPU is usable here: needs torch_npu (pip "
                        "install 'rlbench[npu]', or Dockerfile.npu) and a visible NPU (allowed "
                        "here: cpu, auto)")
    if kind == "cuda" and not cuda_count():
        raise UserError(
            "engine.device=cuda but no CUDA device is visible (allowed here: cpu, auto)"
        )
    if kind == "cpu" or index is None:
        return torch.device(kind)
    return torch.device(kind, index)


def resolve_kind(kind: str) -> str:
    """'auto' -> the accelerator type present ('cuda', 'npu') or 'cpu'; other kinds unchanged."""
    if kind != "auto":
        return kind
    import torch  # inside: instant path: `rlbench --help` imports this module

    return "cuda" if cuda_count() else "npu" if _npu_available() else "cpu"


def available(kind: str) -> int:
    """Physical devices of this kind the process may use: CPU cores in its affinity mask, visible
    GPUs/NPUs."""
    if kind == "cpu":
        return len(cpu_cores())
    import torch  # inside: instant path: `rlbench --help` imports this module

    if kind == "cuda":
        return cuda_count()
    if kind == "npu":
        return torch.npu.device_count() if _npu_available() else 0
    raise ValueError(f"unknown device kind {kind!r}")


def cuda_count() -> int:
    """The CUDA devices this process sees, counted through NVML where it answers
    (torch.cuda.device_count): asking CUDA itself (torch.cuda.is_available) initialises the CUDA
    driver in this process, and a process forked from it, as workers are (core/devices/starting.py),
    could not use CUDA."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    return torch.cuda.device_count()


def cpu_cores() -> list[int]:
    """The cores this process may run on, in order (its affinity mask; all cores where there is
    none)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


# The variable that hides every other accelerator from a process, read when the runtime initialises.
VISIBLE_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}


def visible_env(kind: str, index: int, environ=None) -> dict[str, str]:
    """The environment of a worker process that holds accelerator `index`: only that device visible,
    so every library in the process (the built-in engine, vLLM, Ray) finds it as device 0. `index`
    counts the devices the parent sees: under an inherited CUDA_VISIBLE_DEVICES=4,5, index 1 is
    physical 5. CPU (cores are pinned by affinity): {}."""
    var = VISIBLE_ENV.get(kind)
    if var is None:
        return {}
    env = os.environ if environ is None else environ
    seen = [d.strip() for d in env[var].split(",")
            if d.strip()] if env.get(var) is not None else None
    if seen is not None and index >= len(seen):
        raise UserError(f"a worker needs {kind}:{index}, but {var}={env[var]!r} makes only "
                        f"{len(seen)} visible")
    return {var: seen[index] if seen is not None else str(index)}


def observe(kind: str) -> dict:
    """What this process was actually given: its CPU affinity, intra-op threads, the accelerators it
    can see and their name (recorded next to the plan; a mismatch fails the run)."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    out = {"affinity": cpu_cores(), "threads": torch.get_num_threads()}
    var = VISIBLE_ENV.get(kind)
    if var is not None:
        out["visible"] = os.environ.get(var)
        mod = _accel(torch.device(kind))
        out["device_name"] = (mod.get_device_name(0) if mod is not None and mod.device_count()
                              else None)
    return out


def pin(kind: str, index: int, threads: int) -> None:
    """Hold one device in this process: CPU core `index` (affinity + `threads` intra-op threads; one
    core holds one thread), or accelerator `index` as the current device."""
    set_threads(threads)
    if kind == "cpu":
        cores = cpu_cores()
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {cores[index % len(cores)]})
        return
    import torch  # inside: instant path: `rlbench --help` imports this module

    if kind == "cuda":
        torch.cuda.set_device(index)
    elif kind == "npu":  # pragma: no cover - needs an Ascend NPU
        torch.npu.set_device(index)


def initialise(kind: str, index: int) -> None:
    """Create the accelerator's context now (a tensor on it), so that its cost is timed as the
    start-up's device phase (core/record/lifecycle.py) rather than inside whatever touches the
    device first. CPU: nothing to do."""
    if kind == "cpu":
        return
    import torch  # inside: instant path: `rlbench --help` imports this module

    torch.empty(1, device=torch.device(kind, index))


def _npu_available() -> bool:
    """Imports torch_npu (it registers the 'npu' device with torch) only when an NPU is asked
    for."""
    try:
        import torch  # inside: instant path: `rlbench --help` imports this module
        # inside: optional dependency (torch_npu)
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    return bool(torch.npu.is_available())


def flex_attention_trains(kind: str) -> bool:
    """Whether FlexAttention has a backward on this device kind: CUDA only (elsewhere it runs
    forward only)."""
    return kind == "cuda"


def host_waits_for_kernels(device) -> bool:
    """CPU: the host runs each op itself, so a step costs its dispatch plus its compute.
    Accelerators: the host queues kernels ahead of the device, so a step costs the larger of the
    two."""
    return device.type == "cpu"


def synchronize(device) -> None:
    """Wait for queued device work, so a clock read after it measures finished work."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)


def use_graphs(setting: bool | None, device) -> bool:
    """rollout.cuda_graphs -> whether the built-in sampler replays its decode steps as CUDA graphs:
    unset (None) means where the device is CUDA; true on another device is refused (UserError naming
    the key)."""
    if setting is None:
        return device.type == "cuda"
    if setting and device.type != "cuda":
        raise UserError(f"rollout.cuda_graphs=true needs a CUDA device, and this worker runs on "
                        f"{device.type}; "
                        "leave it unset (on where the device is CUDA) or set it false")
    return bool(setting)


COMPILE_TARGETS = {"off": (), "decode": ("decode",), "train": ("train",),
                   "all": ("decode", "train")}


def compile_targets(setting: str | None, kind: str) -> tuple[str, ...]:
    """engine.compile -> what is compiled ("decode", "train"): unset (None) means all on CUDA, off
    elsewhere (the CPU's inductor builds C++ per graph: tens of seconds a cell for a tiny model's
    milliseconds)."""
    if setting is None:
        setting = "all" if kind == "cuda" else "off"
    return COMPILE_TARGETS[setting]


def compile_problem(setting: str | None, kind: str) -> str | None:
    """Why inductor cannot compile what engine.compile asks for on this device kind (None: it can):
    it needs Triton on CUDA and a C++ compiler on the CPU; other devices have no inductor backend
    here."""
    if not compile_targets(setting, kind):
        return None
    shown = setting if setting is not None else f"unset (all on {kind})"
    if kind == "cuda":
        if not triton_installed():
            return (f"engine.compile={shown} needs Triton for inductor's CUDA kernels, and it is "
                    "not installed (pip install triton, or the torch wheel that ships it); allowed "
                    "here: off")
        return None
    if kind == "cpu":
        cxx = os.environ.get("CXX") or "g++"
        if not shutil.which(cxx) and not (cxx == "g++"
                                          and (shutil.which("c++") or shutil.which("clang++"))):
            return (f"engine.compile={shown} needs a C++ compiler for inductor's CPU backend, and "
                    f"none was found (CXX={os.environ.get('CXX')!r}; g++, c++, clang++ on PATH): "
                    "install one (apt-get install g++) or set engine.compile=off")
        return None
    return f"engine.compile={shown}: inductor has no backend for {kind} here; allowed: off"


def triton_installed() -> bool:
    """Whether Triton can be imported, found without importing it or touching CUDA (the checks
    before a run must leave the process able to fork workers that use CUDA)."""
    return importlib.util.find_spec("triton") is not None


def graph_pool(device):
    """A memory pool that the graphs of one sampler share (they never run at the same time)."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    return torch.cuda.graph_pool_handle()


class Graph:
    """fn() (device work only: no host sync, no data-dependent shapes) captured once as a CUDA
    graph; replay() runs the same kernels on whatever the tensors fn read hold then. fn runs
    `warmup` times first on a side stream, as torch asks (lazy initialisation, cuBLAS workspaces),
    so the tensors it writes hold garbage afterwards."""

    def __init__(self, fn, device, pool=None, warmup: int = 2):
        import torch  # inside: instant path: `rlbench --help` imports this module

        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: another thread of the process (a trainer's, a heartbeat) may use CUDA
        # meanwhile
        with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.outputs = fn()

    def replay(self) -> None:
        self.graph.replay()


def range_context(name: str, device):
    """Profiler range: record_function everywhere, plus NVTX on CUDA and MSTX on NPU."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    stack = contextlib.ExitStack()
    stack.enter_context(torch.profiler.record_function(name))
    if device is None:
        return stack
    if device.type == "cuda":
        stack.enter_context(torch.cuda.nvtx.range(name))
    elif device.type == "npu":  # pragma: no cover - needs an Ascend NPU
        try:
            import torch_npu  # inside: optional dependency (torch_npu)
            stack.enter_context(torch_npu.npu.mstx.range(name))
        except (ImportError, AttributeError):
            pass
    return stack


def set_threads(n: int) -> None:
    """On CPU a device is a core: a worker with n devices uses n intra-op threads."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    torch.set_num_threads(max(1, n))
    os.environ["OMP_NUM_THREADS"] = str(max(1, n))


DTYPES = ("float32", "bfloat16", "float16")


def dtype(name: str, device=None):
    """Config dtype name -> torch dtype; refuses a half precision the device cannot compute in.

    bfloat16 is the dtype for accelerators (A100/H100 and Ascend 910B compute in it natively); on
    CPU it works but is slower than float32 for small models.
    """
    import torch  # inside: instant path: `rlbench --help` imports this module

    if name not in DTYPES:
        raise UserError(f"model.dtype={name!r}: allowed: {', '.join(DTYPES)}")
    if (
        name == "bfloat16"
        and device is not None
        and device.type == "cuda"
        and not torch.cuda.is_bf16_supported()
    ):
        raise UserError("model.dtype=bfloat16 but this GPU has no bfloat16 support (pre-Ampere); "
                        "use model.dtype=float16 or float32")
    return getattr(torch, name)


def _accel(device):
    """The torch.cuda / torch.npu module of an accelerator device, None on CPU."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    return {"cuda": torch.cuda, "npu": getattr(torch, "npu", None)}.get(device.type)


def reset_peak_memory(device) -> None:
    """Start a new peak for memory() (accelerators; on CPU the process peak cannot be reset)."""
    mod = _accel(device)
    if mod is not None:
        mod.reset_peak_memory_stats(device)


def memory(device) -> dict:
    """Memory in bytes. Accelerator: allocated / reserved now, peak allocated, total of the device
    (torch's caching allocator; vLLM's KV cache counts as allocated). CPU: the process's peak
    resident set (ru_maxrss) and the machine's total."""
    mod = _accel(device)
    if mod is not None:
        props = mod.get_device_properties(device)
        return {"allocated": int(mod.memory_allocated(device)),
                "reserved": int(mod.memory_reserved(device)),
                "peak_allocated": int(mod.max_memory_allocated(device)),
                "total": int(props.total_memory)}

    # Linux: KiB
    info = {"peak_rss": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}
    try:
        info["total"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return info


def describe(device) -> dict:
    import torch  # inside: instant path: `rlbench --help` imports this module

    info = {"type": device.type, "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    mod = _accel(device)
    if mod is not None:
        info["name"] = mod.get_device_name(device)
        info["count"] = mod.device_count()
        info["memory_total"] = int(mod.get_device_properties(device).total_memory)
    elif "total" in (mem := memory(device)):
        info["memory_total"] = mem["total"]
    return info


def memory_capacity(kind: str) -> int | None:
    """Bytes of memory one device offers, found without initialising an accelerator (the limits
    checked before a run, core/devices/limits.py): CPU: the machine's available memory
    (MemAvailable; every core shares it); CUDA: the first GPU's total memory (nvidia-smi); None
    where it is not known (NPU, no nvidia-smi)."""
    if kind == "cpu":
        try:
            for line in open("/proc/meminfo"):
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None
    if kind == "cuda":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout.split()
            return int(out[0]) << 20 if out else None
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
    return None
