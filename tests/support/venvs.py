"""The tests that need a venv of their own (VERL's .venv-verl, vLLM's .venv-vllm): the markers that skip
them elsewhere and the one way to run VERL's Python. Shared by the unit tests of the adapters
(tests/unit/engines/) and the runs through the CLI (tests/e2e/)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

VERL_PY = Path(os.environ.get("RLBENCH_VERL_PYTHON", ROOT / ".venv-verl" / "bin" / "python"))
# a venv bash scripts/setup.sh --verl has finished (one still installing, as in .ci/run's first step, is not ready)
READY = "RLBENCH_VERL_PYTHON" in os.environ or (ROOT / ".venv-verl" / ".rlbench-ready").is_file()
live = pytest.mark.skipif(not (VERL_PY.is_file() and READY), reason=f"no VERL venv ready at {VERL_PY} (run "
                          "bash scripts/setup.sh --verl, or set RLBENCH_VERL_PYTHON): VERL's own code not available")


def run_verl_py(*args: str, stdin: str | None = None, cache: Path | None = None) -> str:
    """stdout of VERL's Python running ARGS in the checkout; a failure fails the test with its stderr."""
    env = {**os.environ, **({"HF_DATASETS_CACHE": str(cache)} if cache else {})}  # keep ~/.cache clean
    out = subprocess.run([str(VERL_PY), *args], input=stdin, capture_output=True, text=True, cwd=ROOT,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


try:
    HAS_VLLM = importlib.util.find_spec("vllm") is not None
except ValueError:
    HAS_VLLM = False
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed: bash scripts/setup.sh --vllm, "
                                "then run the tests with .venv-vllm/bin/python")
# cpu-tiny's model with head size 32 (4 heads of a 128 model): sizes vLLM's CPU attention implements.
VLLM_TINY = ["model.hidden_size=128", "model.num_heads=4", "model.num_kv_heads=2", "rollout.backend=vllm"]
