"""The CI page's job (docs/ci.md: scripts/env_ab.sh) end to end: two real venvs built from two lock files that
differ in one package, then `rlbench check --env-a OLD --env-b NEW --record HISTORY`. The new lock adds a
planted package (bench/planted/slow_op.py's wheel: a sitecustomize that makes one torch operator slower), so the
job must fail (exit 1), its report opening with that package beside the stages that call the operator, and
nothing recorded (the history keeps passing A/Bs)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TINY
from support.cli import clean_env, sets

from rlbench.planted import slow_op

UV = Path(sys.executable).parent / "uv"  # scripts/uv_install.sh put it beside this Python
# The operator every forward pass runs (the sampler's and the trainer's attention), four times its CPU time: far
# beyond the noise of a 12-iteration run of one cell, in every stage that runs the model and in none other.
OP, FRACTION = "torch.nn.functional.scaled_dot_product_attention", 3.0
MODEL_STAGES = {"rollout", "update", "old_logprob", "ref_logprob"}
OTHER_STAGES = {"optimizer_step", "weight_sync", "reward", "advantage"}


def _locks(folder: Path) -> tuple[Path, Path]:
    """old.lock: this environment's packages as pinned requirements (installed from uv's cache, nothing
    downloaded); new.lock: the same and the planted package."""
    frozen = subprocess.run([str(UV), "pip", "freeze", "--python", sys.executable, "--exclude-editable"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    lines = [line for line in frozen if line.strip() and not line.lower().startswith("rlbench")]
    old, new = folder / "old.lock", folder / "new.lock"
    old.write_text("\n".join(lines) + "\n")
    new.write_text("\n".join([*lines, str(slow_op.wheel(folder, OP, FRACTION))]) + "\n")
    return old, new


@pytest.mark.e2e
@pytest.mark.slow  # two venvs built and an A/B run: about 5 minutes
@pytest.mark.skipif(not UV.is_file(), reason="uv is installed by scripts/setup.sh")
def test_the_ci_job_builds_two_venvs_from_lock_files_and_fails_on_the_planted_package(tmp_path):
    old, new = _locks(tmp_path)
    out, history = tmp_path / "out", tmp_path / "history.jsonl"
    env = {**clean_env(), "RLBENCH_COMPILE": "0", "RLBENCH_HISTORY": str(history),
           "PYTHON": getattr(sys, "_base_executable", sys.executable)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "env_ab.sh"), str(old), str(new), str(out),
                           "--config", str(TINY), "--ablation", "none",
                           *sets("engine.schedule=sync", "run.iterations=12", "run.warmup_iterations=1")],
                          capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "check.txt").read_text().splitlines()
    assert report[0].startswith(f"A/B of two environments: A = {out / 'env-old' / 'bin' / 'python'} ")
    assert report[1].startswith("packages that differ (A -> B): planted-slow-op absent -> 0.1; sitecustomize.py "
                                "absent -> ")
    moved = {part.split()[0] for part in report[2].split(": ", 1)[1].split("; ")}
    # the slowed operator runs in every stage that runs the model; which of them clear their floors beside
    # rollout varies with the machine's load (update has moved +13% in one run and stayed in its floor in another)
    assert report[2].startswith("stages that moved (B / A): ") and "rollout" in moved and len(moved) >= 2
    assert not moved & OTHER_STAGES and moved <= MODEL_STAGES
    assert "FAIL" in proc.stdout and not history.exists()  # a failing A/B is no step of the history
    (ab, again), = [sorted((out / "ab").iterdir())]
    record = json.loads((ab / "ab.json").read_text())
    assert record["mode"] == "env" and record["envs"]["A"]["prefix"] == str(out / "env-old")
    assert [d[0] for d in record["differ"]] == ["planted-slow-op", "sitecustomize.py"]
    assert record["confirmed_by"] == str(again.resolve())  # the second A/B run confirmed it
    for side in ("env-old", "env-new"):  # each a venv of its own, every locked version as locked
        frozen = subprocess.run([str(UV), "pip", "freeze", "--python", str(out / side / "bin" / "python")],
                                capture_output=True, text=True, check=True).stdout
        assert all(line in frozen.splitlines() for line in old.read_text().splitlines()), side
