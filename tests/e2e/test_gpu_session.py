"""The prepared GPU command (scripts/gpu_session.sh headline) rehearsed on the CPU: `headline --dry` runs
every step of the GPU command at tiny shapes, so a typo or a broken step is found before any GPU minute
is spent. The test reads what the command wrote under $OUT, as the GPU run's files are read."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu_session.sh"
STEPS = ["env", "gpu-tests", "gpu-run", "decode", "shared-prompt", "refpass", "ablation-async", "ablation-1.5b",
         "trl", "token-budget", "profile", "ablation-shared_prompt", "ablation-tri_model"]


def _env(out: Path, seconds: int, scale: int = 3) -> dict:
    bin_dir = str(Path(sys.executable).parent)  # this venv's rlbench and python
    return {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "HEADLINE_SECONDS": str(seconds),
            "HEADLINE_SCALE": str(scale), "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("args", [[], ["quick"], ["headline", "--wet"], ["headline", "--dry", "x"],
                                  ["headline", "--only"], ["headline", "--only", "decode,nope"]])
def test_a_wrong_phase_flag_or_step_exits_2_and_says_the_usage(tmp_path, args):
    r = subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=_env(tmp_path / "o", 60),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage: bash scripts/gpu_session.sh headline [--dry] [--only STEP,...]" in r.stderr
    assert ", ".join(STEPS) in r.stderr  # the step names it takes
    assert not (tmp_path / "o").exists()  # nothing written before the arguments are known good


def test_only_takes_the_steps_it_names_in_the_commands_order(tmp_path):
    """What is left of a GPU window goes to some steps again: --only names them; the others leave no line.
    (With no budget left each named step is skipped, and says so: the steps themselves run in the test below.)"""
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT), "headline", "--dry", "--only", "decode,ablation-tri_model,env"],
                       cwd=ROOT, env=_env(out, 0), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()]
    assert steps == [["env", "skipped", "0"], ["decode", "skipped", "0"], ["ablation-tri_model", "not started", "0"]]
    assert "== gpu-tests" not in r.stdout and "== profile" not in r.stdout


def _runs(archive: Path) -> dict[str, dict]:
    """run name -> {cell: results.json} from the archive of run folders."""
    found: dict[str, dict] = {}
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if m.isfile() and parts[-1] == "results.json" and len(parts) >= 3:
                found.setdefault(parts[-3], {})[parts[-2]] = json.load(tar.extractfile(m))
    return found


@pytest.mark.e2e
@pytest.mark.slow  # 2-4 minutes alone, up to 14 beside the suite on 2 cores: the rehearsal before a GPU window
def test_headline_dry_runs_every_step_and_returns_at_most_8_files(tmp_path):
    """Every step runs to exit 0: the budget and the steps' limits are the GPU's, scaled far past what a CPU
    needs even beside other work (a step cut by a wall-clock limit on a loaded machine is not a broken
    step; a step that hangs still ends the test at its timeout)."""
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT), "headline", "--dry"], cwd=ROOT, env=_env(out, 36000, scale=100),
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8, files  # the device tool returns at most 8 files
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()]
    assert [s[0] for s in steps] == STEPS and all(s[1] == "0" for s in steps), steps

    env = json.loads((out / "env.json").read_text())
    assert env["peak"]["matmul_flops_per_s"] > 0 and env["peak"]["copy_bytes_per_s"] > 0
    decode = json.loads((out / "micro-decode.json").read_text())
    assert [d["batch"] for d in decode["sampler"]] == [1, 8]
    assert all(d["builtin"]["decode_tok_s"] > 0 and d["hf_generate"]["decode_tok_s"] > 0 and
               d["builtin"]["ops_per_layer"] > 0 for d in decode["sampler"])
    packing = json.loads((out / "micro-packing.json").read_text())
    (shape,) = packing["packing"]  # the dry run's one shape (the GPU run's: three)
    assert shape["seconds"]["unpacked"] > 0 and shape["seconds"]["dense"] > 0 and not shape["errors"]
    assert all("error" not in v for v in packing["equivalence"]["float32"].values())

    runs = _runs(out / "runs.tar.gz")
    # by the run's name less "headline-" (its folder's name ends with the ablation's: two async runs)
    by_ablation = {next(iter(cells.values()))["config"]["run"]["name"].removeprefix("headline-"): cells
                   for cells in runs.values()}
    assert set(by_ablation["async"]) >= {"sync", "periodic_async_barrier", "periodic_async"}
    for cell, res in by_ablation["async"].items():
        measured = [it for it in res["iterations"] if not it.get("warmup")]
        assert len(measured) >= 3, (cell, len(measured))
    assert len(by_ablation["shared_prompt"]) >= 2 and len(by_ablation["tri_model"]) >= 2
    # the 1.5B step's keys at the tiny shape: few-shot prompts, log-normal lengths, token-budget micro-batches
    assert set(by_ablation["1.5b"]) >= {"sync", "periodic_async_barrier", "periodic_async"}
    for cell, res in by_ablation["1.5b"].items():
        c = res["config"]
        assert c["data"]["few_shot"] == 1 and c["rollout"]["response_length"] == "lognormal", cell
        assert c["train"]["micro_batch_tokens"] == 600, cell
        assert len([it for it in res["iterations"] if not it.get("warmup")]) >= 2, cell
    # TRL beside rlbench's sync: both of TRL's on-policy cells ran, as TRL, every cell eager, to EOS
    trl = by_ablation["trl"]
    assert set(trl) == {"sync", "trl", "trl_cb"}
    for cell, res in trl.items():
        assert res["status"] == "complete" and res["config"]["engine"]["compile"] == "off", cell
        assert res["config"]["rollout"]["response_length"] == "eos", cell
        assert len([it for it in res["iterations"] if not it.get("warmup")]) >= 1, cell
        assert (res.get("external") or {}).get("framework") == (None if cell == "sync" else "trl"), cell
    (budget,) = by_ablation["budget"].values()  # token budget and compile on: what was compiled, and when
    assert budget["config"]["train"]["micro_batch_tokens"] == 300 and budget["config"]["engine"]["compile"] == "all"
    assert budget["lifecycle"]["compile"]["trainer"]["compiles"] > 0
    assert all(p.get("compile", 0) > 0 for w, p in budget["lifecycle"]["startup_phases"].items() if w != "driver")
    assert all(d["builtin_compiled"]["decode_tok_s"] > 0 for d in decode["sampler"])
    with tarfile.open(out / "runs.tar.gz") as tar:  # the profile's operator tables come back, its traces not
        names = tar.getnames()
        refpass = json.load(tar.extractfile("./micro-refpass.json"))  # the policy/frozen pass, each layout
    assert all(refpass["seconds"][layout][w] > 0 for layout in ("unpacked", "dense") for w in ("policy", "reference"))
    assert any(n.endswith("sync/traces/colocated0.ops.txt") for n in names), names
    assert not any(".pt.trace.json" in n for n in names)
