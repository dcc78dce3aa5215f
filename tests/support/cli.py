"""The one way the tests run the real `rlbench` command: in a fork of this pytest process's warm
interpreter (support/warm.py: torch, transformers and the CLI imported once, not ~11 CPU-s again for
every run), or in a fresh interpreter, as a user's shell starts it, where a fork could not show what the
test looks at (fresh=True, or an environment that differs in more than RLBENCH_* variables).

A test that starts `rlbench run` (or `check --against`) through these is marked `e2e`: it starts cell and
worker processes (docs/architecture/tests.md).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.warm import inherited, warm


def argv(*args, prelude: str | None = None) -> list[str]:
    """The command line of `rlbench ARGS`; prelude: Python run first in that interpreter (e.g. hiding a
    package from it)."""
    if prelude is None:
        return [sys.executable, "-m", "rlbench.cli", *map(str, args)]
    code = f"import sys; {prelude}; from rlbench.cli import main; sys.argv = ['rlbench', *sys.argv[1:]]; main()"
    return [sys.executable, "-c", code, *map(str, args)]


def rlbench(*args, env: dict | None = None, prelude: str | None = None, timeout: float = 600,
            base_env: dict | None = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """`rlbench ARGS` to the end, output captured as text. env is laid over base_env (default: this
    process's environment, read at the call, without the OpenMP and MKL settings that in-process tests
    leave in it: a user's shell has none). prelude: Python run first (in the fork, or the fresh
    interpreter). fresh: in a fresh interpreter, never a fork of the warm one (a test of what the command's
    own interpreter imports or starts with)."""
    full = {**(inherited() if base_env is None else base_env), **(env or {})}
    if not fresh and os.environ.get("RLBENCH_TESTS_FRESH") != "1":
        done = warm().run(args, full, timeout, prelude)
        if done is not None:
            return done
    return subprocess.run(argv(*args, prelude=prelude), capture_output=True, text=True, timeout=timeout, env=full)


def sets(*overrides: str) -> list[str]:
    """--set arguments: sets("a=1", "b=2") -> ["--set", "a=1", "--set", "b=2"]."""
    return [a for s in overrides for a in ("--set", s)]


def only_run(out: Path) -> Path:
    """The one run folder that `rlbench run --out OUT` made."""
    (run_dir,) = [p for p in Path(out).iterdir() if p.is_dir()]
    return run_dir


def clean_env() -> dict:
    """A user's shell environment: `inherited` (no thread settings) without the test hooks that in-process
    tests earlier in the session may have left in this process's environment."""
    return {k: v for k, v in inherited().items() if not k.startswith(("RLBENCH_SLOW", "RLBENCH_FAULT", "RLBENCH_PROFILE"))}


def fault_keeps_iterations(out: Path, fault: str, overrides: list[str], cell: str, message: str, process: str):
    """A one-cell run of the tiny config whose workers die at iteration 2 (RLBENCH_FAULT=fault): exit code
    3 with `message`, iterations 0-1 kept in a 'failed' results.json, and no process matching `process`
    left behind."""
    from conftest import TINY
    from rlbench.core.results import schema

    proc = rlbench("run", "--config", TINY, "--out", out, "--ablation", "none", "--no-progress", "--no-report",
                   *sets(*overrides), env={"RLBENCH_FAULT": fault}, timeout=300)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert message in proc.stderr
    res = schema.load_cell(only_run(out) / cell)
    assert res["status"] == "failed" and "died" in res["error"]
    assert [it["iteration"] for it in res["iterations"]] == [0, 1]
    leftover = subprocess.run(["pgrep", "-f", process], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
