"""configs/cpu-accuracy.yaml through the real CLI: a few iterations with small evaluations (the full
workload is in docs/experiments.md), checking the accuracy curve and time-to-accuracy table it writes."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import ROOT
from support.cli import only_run, rlbench, sets
from rlbench.core.config_files import load_config
from rlbench.core.results import schema

ACCURACY = ROOT / "configs" / "cpu-accuracy.yaml"
SHORT = ["run.iterations=3", "run.warmup_iterations=1", "run.eval_every=1", "data.eval_size=8",
         "model.warmstart_steps=20"]


@pytest.mark.e2e
def test_accuracy_config_short_run_through_the_cli(tmp_path):
    cfg = load_config(ACCURACY, SHORT)
    proc = rlbench("run", "--config", ACCURACY, "--ablation", "none", "--out", tmp_path, "--no-progress",
                   *sets(*SHORT), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(tmp_path)
    (res,) = schema.load_run(run_dir)
    assert res["status"] == "complete" and res["config"]["run"]["name"] == "cpu-accuracy"
    assert [e["iteration"] for e in res["evals"]] == [0, 1, 2, 3] and res["evals"][0]["n"] == 8
    assert all(it["num_samples"] == cfg.batch_size for it in res["iterations"])
    acc = pd.read_csv(run_dir / "accuracy.csv")
    assert acc["cell"].tolist() == [cfg.engine.schedule]
    assert acc["accuracy_first"][0] == res["evals"][0]["accuracy"]
    assert acc["accuracy_final"][0] == res["evals"][-1]["accuracy"]
    assert 0 < acc["train_wall_s"][0] <= sum(it["wall_s"] for it in res["iterations"]) + res["iterations"][-1]["end"]
    assert acc["mixed_groups_first"].notna().all()
    assert (run_dir / "plots" / "accuracy_time.png").is_file()
    assert "acc before→after" in proc.stdout  # the terminal's key columns; the time-to-target table with --wide
    wide = rlbench("report", run_dir, "--wide")
    assert wide.returncode == 0 and "time to target" in wide.stdout
    assert json.loads((run_dir / schema.ABLATION).read_text())["cells"][0]["exit_code"] == 0
