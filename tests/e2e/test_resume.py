"""`rlbench run --resume RUN_DIR`: completed cells kept and verified, the interrupted one run again from its
start, the report over every cell; a changed config or code is refused (exit 2)."""
import json
import re
import os
import shutil
import signal
import subprocess
import time

import pandas as pd
import pytest

from conftest import TINY, default_sigint
from support.cli import argv, clean_env, only_run, rlbench

from rlbench.core.results import schema


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """Two cells (one per seed) interrupted by Ctrl-C in the second: -> the run folder."""
    out = tmp_path_factory.mktemp("runs")
    # Planted slowdowns keep the second cell mid-run when the signal lands: unslowed, a tiny cell's last
    # iterations can finish between the poll below and the SIGINT (CI saw it complete, exit 130). The first
    # cell, which must complete, runs at full speed.
    env = {**clean_env(), "RLBENCH_SLOW": "decode:10@sync@seed1,update:10@sync@seed1"}
    proc = subprocess.Popen(argv("run", "--config", TINY, "--out", out, "--no-progress", "--no-report",
                                 "--ablation", "none", "--seeds", "0,1", "--set", "run.iterations=6"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=env, preexec_fn=default_sigint)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        second = list(out.glob("*/sync@seed1/" + schema.ITERATIONS))
        if second and len(second[0].read_text().splitlines()) >= 1:
            break
        time.sleep(0.3)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    return only_run(out)


@pytest.mark.e2e
def test_resume_keeps_completed_cells_and_reruns_the_interrupted_one(interrupted, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(interrupted, run_dir)
    before = json.loads((run_dir / schema.ABLATION).read_text())
    assert [c["exit_code"] for c in before["cells"]] == [0, 130]
    assert schema.load_cell(run_dir / "sync@seed1")["status"] == "interrupted"
    kept = (run_dir / "sync@seed0" / schema.RESULTS).read_bytes()

    proc = rlbench("run", "--resume", str(run_dir), "--no-progress", env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kept 1 completed cell(s) (sync@seed0), running 1" in proc.stderr
    assert (run_dir / "sync@seed0" / schema.RESULTS).read_bytes() == kept  # not run again
    res = schema.load_cell(run_dir / "sync@seed1")
    assert res["status"] == "complete" and [it["iteration"] for it in res["iterations"]] == list(range(6))
    assert len(schema.read_jsonl(run_dir / "sync@seed1" / schema.ITERATIONS)) == 6  # from the start, once
    assert [c["exit_code"] for c in json.loads((run_dir / schema.ABLATION).read_text())["cells"]] == [0, 0]
    assert {r["cell"] for r in schema.load_run(run_dir)} == {"sync@seed0", "sync@seed1"}
    assert (run_dir / "report.html").is_file()
    assert re.search(r"^sync\s", proc.stdout, re.M) and "median over seeds" in proc.stdout  # one row, both seeds
    assert pd.read_csv(run_dir / "summary.csv").set_index("cell")["seeds"]["sync"] == 2


@pytest.mark.e2e
def test_resume_refuses_other_code(interrupted, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(interrupted, run_dir)
    record = json.loads((run_dir / schema.ABLATION).read_text())
    record["code_digest"] = "0123456789abcdef"
    (run_dir / schema.ABLATION).write_text(json.dumps(record))
    proc = rlbench("run", "--resume", str(run_dir), "--no-progress", env=clean_env(), timeout=120)
    assert proc.returncode == 2 and "made by rlbench code 0123456789abcdef" in proc.stderr, proc.stderr[-2000:]
    assert (run_dir / "sync@seed1" / schema.RESULTS).is_file()  # nothing changed


@pytest.mark.e2e
def test_resume_refuses_a_kept_cell_of_another_config(interrupted, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(interrupted, run_dir)
    path = run_dir / "sync@seed0" / schema.RESULTS
    res = json.loads(path.read_text())
    res["config"]["train"]["lr"] = 0.5
    path.write_text(json.dumps(res))
    proc = rlbench("run", "--resume", str(run_dir), "--no-progress", env=clean_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "completed cell sync@seed0" in proc.stderr and "train.lr" in proc.stderr
    assert schema.load_cell(run_dir / "sync@seed1")["status"] == "interrupted"  # nothing changed


def test_resume_takes_no_other_configuration(tmp_path):
    proc = rlbench("run", "--resume", str(tmp_path), "--set", "train.lr=1e-3", timeout=120)
    assert proc.returncode == 2 and "leave out --set" in proc.stderr, proc.stderr[-2000:]
    proc = rlbench("run", "--resume", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "no ablation.json" in proc.stderr, proc.stderr[-2000:]
