"""Small real runs through the real `rlbench` command: result files, failures, reproducibility."""
import json
import os
import subprocess
import sys

import pytest

from conftest import TINY, default_sigint

from rlbench.core.results import schema


def rlbench(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "rlbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    proc = rlbench("run", "--config", str(TINY), "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    return run_dir, proc


def test_run_writes_valid_result_files(tiny_run):
    run_dir, proc = tiny_run
    abl = json.loads((run_dir / schema.ABLATION).read_text())
    assert [c["name"] for c in abl["cells"]] == ["sync", "periodic_async_barrier", "periodic_async"]
    assert all(c["exit_code"] == 0 for c in abl["cells"])
    cells = schema.load_run(run_dir)
    for res in cells:
        assert res["status"] == "complete"
        its = res["iterations"]
        assert len(its) == 3 and [it["iteration"] for it in its] == [0, 1, 2]
        for it in its:
            assert it["tokens"] == it["prompt_tokens"] + it["response_tokens"] > 0
            assert it["tpspd"] == pytest.approx(it["tokens"] / (it["wall_s"] * it["devices"]))
            assert it["staleness_max"] == 0
        assert res["aggregates"]["tpspd"]["n"] == 2  # one warm-up iteration excluded
        assert len(res["evals"]) == 2 and res["evals"][-1]["n"] == 8  # before and after, on the eval split
        assert schema.read_jsonl(run_dir / res["cell"] / schema.ITERATIONS) == its
        samples = schema.load_samples(run_dir / res["cell"])
        assert len(samples) == 3 * 4 * 4
        events = schema.load_events(run_dir / res["cell"])
        assert {"rollout", "update", "optimizer_step", "weight_sync"} <= {e["stage"] for e in events}
    async_events = schema.load_events(run_dir / "periodic_async")
    assert {"trainer0", "rollout0"} <= {e["worker"] for e in async_events}
    assert "results:" in proc.stdout and "TPSPD" in proc.stdout


def test_the_run_ends_with_the_verdict_within_100_columns(tiny_run):
    """What a user reads after `rlbench run`: the verdict first, then the key columns, every line of the
    table within 100 characters (the run and report paths follow, as long as the folder's name)."""
    run_dir, proc = tiny_run
    out = proc.stdout.splitlines()
    assert out[0] == "Verdict:" and "periodic_async " in out[1] and "sync's TPSPD (predicted " in out[1]
    assert any(w in proc.stdout.split("\n\n")[0] for w in ("wins here", "loses here", "about even here"))
    table = [line for line in out if not line.startswith(("report: ", "results: "))]
    assert max(len(line) for line in table) <= 100, max(table, key=len)
    head = next(line for line in out if line.startswith("cell "))
    assert "acc before→after" in head and "rollout tok/s" not in head
    assert proc.stdout.count("TPSPD median (min–max)") == 1 and "pass@1 first→final" not in proc.stdout


def test_report_wide_prints_every_column(tiny_run):
    run_dir, _ = tiny_run
    proc = rlbench("report", str(run_dir), "--wide")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("Verdict:\n")
    head = next(line for line in proc.stdout.splitlines() if line.startswith("cell "))
    assert "rollout tok/s" in head and "idle % per worker" in head and "max stale" in head and len(head) > 100
    assert "pass@1 first→final" in proc.stdout and "rollout %: share of a sync iteration" in proc.stdout
    md = (run_dir / "summary.md").read_text()
    first = next(line for line in md.splitlines() if line.startswith("|"))
    assert md.index("## Verdict") < md.index(first) and first.count(" | ") + 1 <= 8


def test_every_cell_records_start_up_memory_and_evaluation_time(tiny_run):
    """What `check --against` judges outside the iterations (bench/check/lifecycle.py) is in every results.json:
    start-up to the first measured iteration, peak memory and CPU of the cell process and of every worker,
    and each evaluation's wall time (its eval stage event) and CPU."""
    run_dir, _ = tiny_run
    for res in schema.load_run(run_dir):
        life = res["lifecycle"]
        assert 0 < life["startup_cpu_s"] and 0 < life["startup_s"] < res["wall_s_total"] + 60, life
        assert life["ring_wait_s"] == 0.0  # cells one after the other: no turn ring
        workers = {p["worker"] for p in res["placement"]}
        assert set(life["peak_rss_mb"]) == workers and all(mb > 50 for mb in life["peak_rss_mb"].values())
        assert set(life["process_cpu_s"]) == workers and sum(life["process_cpu_s"].values()) > 0
        evals = [e for e in schema.load_events(run_dir / res["cell"]) if e["stage"] == "eval"]
        assert [e["wall_s"] for e in res["evals"]] == [round(e["end"] - e["start"], 4) for e in evals]
        assert all(e["cpu_s"] >= 0 for e in res["evals"])  # every process's CPU during the evaluation


def test_run_records_per_stage_utilisation(tiny_run):
    run_dir, _ = tiny_run
    for res in schema.load_run(run_dir):
        peak = res["provenance"]["peak"]
        assert peak["matmul_flops_per_s"] > 0 and peak["copy_bytes_per_s"] > 0
        util = res["aggregates"]["utilisation"]
        assert {"rollout", "old_logprob", "ref_logprob", "update"} <= set(util)
        assert 0 < util["update"]["mfu"] < 1 and 0 < util["rollout"]["bw_util"] < 1
        its = schema.measured(res["iterations"])  # the counted work over the stage's seconds, by hand
        flops = sum(it["work"]["update"]["flops"] for it in its)
        assert flops > 0 and util["update"]["mfu"] == pytest.approx(
            flops / sum(it["stage_s"]["update"] for it in its) / peak["matmul_flops_per_s"])
    text = (run_dir / "summary.md").read_text()
    assert "Hardware utilisation per stage" in text and (run_dir / "utilisation.csv").is_file()


def test_same_seed_same_samples(tiny_run, tmp_path):
    run_dir, _ = tiny_run
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   "--no-report")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (again,) = list(tmp_path.iterdir())
    first = [(s["iteration"], s["prompt"], s["sample"], s["response_len"], s["reward"])
             for s in schema.load_samples(run_dir / "sync")]
    second = [(s["iteration"], s["prompt"], s["sample"], s["response_len"], s["reward"])
              for s in schema.load_samples(again / "sync")]
    assert first == second
    a = schema.load_cell(run_dir / "sync")
    b = schema.load_cell(again / "sync")
    assert a["final_params_sha256"] == b["final_params_sha256"]


def fault_keeps_iterations(tmp_path, fault: str, sets: list[str], cell: str, message: str, process: str):
    """A run whose workers die at iteration 2 (RLBENCH_FAULT=fault): exit code 3 with `message`,
    iterations 0-1 kept in a 'failed' results.json, and no process matching `process` left behind."""
    overrides = [arg for s in sets for arg in ("--set", s)]
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   "--no-report", *overrides, env={"RLBENCH_FAULT": fault}, timeout=300)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert message in proc.stderr
    (run_dir,) = list(tmp_path.iterdir())
    res = schema.load_cell(run_dir / cell)
    assert res["status"] == "failed" and "died" in res["error"]
    assert [it["iteration"] for it in res["iterations"]] == [0, 1]
    leftover = subprocess.run(["pgrep", "-f", process], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


def test_dead_rollout_worker_keeps_measured_iterations(tmp_path):
    fault_keeps_iterations(tmp_path, "rollout_exit:2", ["engine.schedule=periodic_async"], "periodic_async",
                           "worker rollout0 died", "rlbench-rollout0")


def test_dead_colocated_rank_keeps_measured_iterations(tmp_path):
    fault_keeps_iterations(tmp_path, "trainer_exit:2", ["engine.schedule=sync"], "sync",
                           "died while running iteration 2", "rlbench-colocated")


def test_malformed_data_line_exit_2(tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "broken"\n')
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path / "runs"), "--ablation", "none",
                   "--no-progress", "--set", "data.source=gsm8k", "--set", f"data.path={data}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{data}:2" in proc.stderr


def clean_env() -> dict:
    """A user's shell environment: without the thread settings and test hooks that in-process tests
    earlier in the session may have left in this process's environment."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("RLBENCH_SLOW", "RLBENCH_FAULT", "RLBENCH_PROFILE", "OMP_", "MKL_"))}


def test_ctrl_c_exits_130_and_keeps_iterations(tmp_path):
    """SIGINT to the process group, as a terminal's Ctrl-C sends it: exit 130, the cell's measured
    iterations kept with status interrupted, the report still written."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "rlbench.cli", "run", "--config", str(TINY), "--out",
                             str(tmp_path), "--no-progress", "--ablation", "none", "--set", "run.iterations=100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=clean_env(), preexec_fn=default_sigint)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        its = list(tmp_path.glob("*/sync/" + schema.ITERATIONS))
        if its and len(its[0].read_text().splitlines()) >= 2:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)  # saving results and writing the report; slow on a loaded machine
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err
    (run_dir,) = list(tmp_path.iterdir())
    res = schema.load_cell(run_dir / "sync")
    assert res["status"] == "interrupted" and len(res["iterations"]) >= 2
    assert (run_dir / "report.html").is_file()
