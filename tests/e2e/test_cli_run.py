"""Small real runs through the real `rlbench` command: result files, failures, reproducibility (Ctrl-C and a
dead colocated rank: tests/e2e/test_process_hygiene.py)."""
import json

import pytest

from conftest import ASYNC_LADDER, TINY
from support.cli import fault_keeps_iterations, only_run, rlbench, sets

from rlbench.core.results import schema

ITERATIONS = 4  # conftest.ASYNC_LADDER's, one of them warm-up


@pytest.fixture(scope="module")
def tiny_run(async_ladder_run):
    """`rlbench run --ablation async` of cpu-tiny (conftest.py's shared run)."""
    return async_ladder_run


@pytest.mark.e2e
def test_run_writes_valid_result_files(tiny_run):
    run_dir, proc = tiny_run
    abl = json.loads((run_dir / schema.ABLATION).read_text())
    assert [c["name"] for c in abl["cells"]] == ["sync", "periodic_async_barrier", "periodic_async"]
    assert all(c["exit_code"] == 0 for c in abl["cells"])
    cells = schema.load_run(run_dir)
    for res in cells:
        assert res["status"] == "complete"
        its = res["iterations"]
        assert [it["iteration"] for it in its] == list(range(ITERATIONS))
        for it in its:
            assert it["tokens"] == it["prompt_tokens"] + it["response_tokens"] > 0
            assert it["tpspd"] == pytest.approx(it["tokens"] / (it["wall_s"] * it["devices"]))
            assert it["staleness_max"] == 0
        assert res["aggregates"]["tpspd"]["n"] == ITERATIONS - 1  # one warm-up iteration excluded
        assert len(res["evals"]) == 2 and res["evals"][-1]["n"] == 8  # before and after, on the eval split
        assert schema.read_jsonl(run_dir / res["cell"] / schema.ITERATIONS) == its
        samples = schema.load_samples(run_dir / res["cell"])
        assert len(samples) == ITERATIONS * 4 * 4  # 4 prompts x G = 4 per iteration
        events = schema.load_events(run_dir / res["cell"])
        assert {"rollout", "update", "optimizer_step", "weight_sync"} <= {e["stage"] for e in events}
    async_events = schema.load_events(run_dir / "periodic_async")
    assert {"trainer0", "rollout0"} <= {e["worker"] for e in async_events}
    assert "results:" in proc.stdout and "TPSPD" in proc.stdout


@pytest.mark.e2e
def test_the_run_ends_with_the_verdict_within_100_columns(tiny_run):
    """What a user reads after `rlbench run`: the verdict first, then the key columns, every line of the
    table within 100 characters (the run and report paths follow, as long as the folder's name)."""
    run_dir, proc = tiny_run
    out = proc.stdout.splitlines()
    verdict = " ".join(line.strip() for line in proc.stdout.split("\n\n")[0].splitlines()[1:])
    assert out[0] == "Verdict:" and out[1].startswith("  periodic_async ") and "sync's TPSPD (" in out[1]
    assert "iterations for a 95% interval" in verdict or "% interval " in verdict  # the interval, or why none
    assert "predicted " in verdict
    assert any(w in proc.stdout.split("\n\n")[0] for w in ("wins here", "loses here", "even here",
                                                              "too few iterations to call"))
    table = [line for line in out if not line.startswith(("report: ", "results: "))]
    assert max(len(line) for line in table) <= 100, max(table, key=len)
    head = next(line for line in out if line.startswith("cell "))
    assert "acc before→after" in head and "rollout tok/s" not in head
    assert proc.stdout.count("TPSPD median (min–max)") == 1 and "pass@1 first→final" not in proc.stdout


@pytest.mark.e2e
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



@pytest.mark.e2e
def test_compare_of_reruns_says_whether_their_verdicts_agree(tiny_run):
    """`rlbench compare` with three runs of one config (here the same run three times): the side-by-side
    table of the first two, then every cell's verdict in each run and whether they agree."""
    run_dir, _ = tiny_run
    proc = rlbench("compare", str(run_dir), str(run_dir), str(run_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    across = proc.stdout.split("Verdicts across the 3 runs", 1)[1]
    for cell in ("periodic_async_barrier / sync", "periodic_async / sync"):
        block = across.split(cell + ":", 1)[1]
        assert [f"run {i}:" in block for i in (1, 2, 3)] == [True] * 3
    assert "every run says" in across

@pytest.mark.e2e
def test_every_cell_records_start_up_memory_and_evaluation_time(tiny_run):
    """What `check --against` judges outside the iterations (bench/check/lifecycle.py) is in every results.json:
    start-up to the first measured iteration, peak memory and CPU of the cell process and of every worker,
    and each evaluation's wall time (its eval stage event) and CPU."""
    run_dir, _ = tiny_run
    waits = []
    for res in schema.load_run(run_dir):
        life = res["lifecycle"]
        assert 0 < life["startup_cpu_s"] and 0 < life["startup_s"] < res["wall_s_total"] + 60, life
        assert res["config"]["run"]["interleave"] and life["ring_wait_s"] >= 0.0  # interleaved: the default
        waits.append(life["ring_wait_s"])
        workers = {p["worker"] for p in res["placement"]}
        assert set(life["peak_rss_mb"]) == workers and all(mb > 50 for mb in life["peak_rss_mb"].values())
        assert set(life["process_cpu_s"]) == workers and sum(life["process_cpu_s"].values()) > 0
        evals = [e for e in schema.load_events(run_dir / res["cell"]) if e["stage"] == "eval"]
        assert [e["wall_s"] for e in res["evals"]] == [round(e["end"] - e["start"], 4) for e in evals]
        assert all(e["cpu_s"] >= 0 for e in res["evals"])  # every process's CPU during the evaluation
    assert max(waits) > 0  # the cells took turns: each waited for the others' iterations


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_same_seed_same_samples(tiny_run, tmp_path):
    """The same seed in a fresh interpreter, as a user's shell starts it: the same samples and weights as the
    ladder's run, which ran in a fork of the tests' warm interpreter (support/warm.py)."""
    run_dir, _ = tiny_run
    proc = rlbench("run", "--config", TINY, "--out", tmp_path, "--ablation", "none", "--no-progress",
                   "--no-report", *sets(*ASYNC_LADDER), fresh=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = only_run(tmp_path)
    first = [(s["iteration"], s["prompt"], s["sample"], s["response_len"], s["reward"])
             for s in schema.load_samples(run_dir / "sync")]
    second = [(s["iteration"], s["prompt"], s["sample"], s["response_len"], s["reward"])
              for s in schema.load_samples(again / "sync")]
    assert first == second
    a = schema.load_cell(run_dir / "sync")
    b = schema.load_cell(again / "sync")
    assert a["final_params_sha256"] == b["final_params_sha256"]


@pytest.mark.e2e
def test_dead_rollout_worker_keeps_measured_iterations(tmp_path):
    fault_keeps_iterations(tmp_path, "rollout_exit:2", ["engine.schedule=periodic_async"], "periodic_async",
                           "worker rollout0 died", "rlbench-rollout0")


def test_malformed_data_line_exit_2(tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "broken"\n')
    proc = rlbench("run", "--config", TINY, "--out", tmp_path / "runs", "--ablation", "none",
                   "--no-progress", "--set", "data.source=gsm8k", "--set", f"data.path={data}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{data}:2" in proc.stderr
