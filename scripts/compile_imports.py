"""Compile the bytecode of the modules rlbench's commands import, and only those: scripts/setup.sh runs it
after installing (`--dev`: the test suite's too).

Why not all of them: uv can compile every module of the venv as it installs (`--compile-bytecode`), but
that is about 14,000 files (transformers' 2,600 model folders, sympy, pip, ...), 70 s of two cores on an
AMD EPYC of the project's kind and most of a first setup, while `rlbench run` imports about 3,000 of them.
Why at all: Python compiles a module that has no .pyc each time a process imports it and, where
PYTHONDONTWRITEBYTECODE is set (as on the project's machines), never writes the .pyc: every run's
processes would compile torch and transformers again (about 6 s of CPU each time).

Each group imports in its own interpreter, with bytecode writing on, beside the others (both cores); a
module imported later that no group names is compiled as before, where it is imported.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from rlbench.core.devices.starting import PRELOAD

# What the processes of `rlbench run` import: the fork servers' preload list (every cell and worker), the
# tiny model's architectures, and `rlbench run` itself with its report (pandas, matplotlib).
RUN = {
    "workers": (*PRELOAD, "transformers.models.qwen2.modeling_qwen2",
                "transformers.models.llama.modeling_llama", "transformers.models.auto.modeling_auto",
                "safetensors.torch"),
    "driver": ("rlbench.cli", "rlbench.run.ablation", "rlbench.reports.build", "rlbench.reports.html",
               "rlbench.reports.plots", "rlbench.analysis.verdict", "matplotlib.pyplot", "pandas", "pyarrow"),
}
# What the test suite adds (`--dev`): pytest and its plugins, hypothesis, and what the tests of the optional
# engines import (Ray, TRL, W&B, TensorBoard's writer, torch.compile's inductor).
DEV = {
    "pytest": ("pytest", "xdist.plugin", "xdist.remote", "pytest_benchmark.plugin", "hypothesis",
               "hypothesis.strategies", "tensorboard.backend.event_processing.event_accumulator",
               "torch.utils.tensorboard"),
    "compile": ("torch._dynamo", "torch._inductor.compile_fx"),
    # the processes a Ray start runs, with what they import beyond Ray (aiohttp, grpc, ...)
    "ray": ("ray._private.workers.default_worker", "ray.dashboard.agent", "ray.dashboard.dashboard",
            "ray._private.runtime_env.agent.main", "ray._private.log_monitor"),
    "peers": ("trl", "trl.trainer.grpo_trainer", "datasets", "accelerate", "wandb"),
}


def compile_groups(groups: dict, python: str = sys.executable, environ=None) -> list[str]:
    """Import each group in its own interpreter, all at once; -> the groups that failed (a module this
    environment lacks: an optional extra not installed), whose modules compile later, where imported."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    procs = {name: subprocess.Popen([python, "-c", _importing(mods)], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
             for name, mods in groups.items()}
    return [name for name, proc in procs.items() if proc.wait() != 0]


def _importing(modules) -> str:
    """Code that imports each module, going on past one that fails (its exit code then says so)."""
    return ("import importlib, sys\nfailed = 0\n"
            f"for m in {list(modules)!r}:\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception:\n        failed = 1\n"
            "sys.exit(failed)\n")


def main(argv: list[str]) -> int:
    groups = {**RUN, **(DEV if "--dev" in argv else {})}
    t = time.monotonic()
    failed = compile_groups(groups)
    note = f" (not all importable here: {', '.join(failed)})" if failed else ""
    print(f"compiled the bytecode of {len(groups)} groups of imports in {time.monotonic() - t:.0f} s{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
