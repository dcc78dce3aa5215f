"""TRL's GRPOTrainer beside rlbench, for real: one `rlbench run --ablation peers` on the tiny config through
the CLI (shared by the tests of this module), read back from its result files; and the refusals (exit 2)
before anything runs."""
import pytest

from conftest import TINY
from support.cli import rlbench
from rlbench.core.results import schema

pytest.importorskip("trl")

ITERATIONS = 3  # one warm-up, two measured
CELLS = ("sync", "periodic_async", "trl", "trl_cb", "trl_off_policy", "sync+tri_model+shared_prompt")
TRL = ("trl", "trl_cb", "trl_off_policy")


def cli(*args, timeout=900):
    return rlbench("run", "--config", TINY, "--no-progress", *args, timeout=timeout)


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    """-> (run folder, {cell: results.json with events and samples})."""
    out = tmp_path_factory.mktemp("peers")
    proc = cli("--ablation", "peers", "--set", f"run.iterations={ITERATIONS}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_dir = next(p for p in out.iterdir() if p.is_dir())
    cells = {}
    for entry in schema.read_ablation(run_dir)["cells"]:
        res = schema.load_cell(run_dir / entry["dir"])
        res["_events"], res["_samples"] = schema.load_events(res["_dir"]), schema.load_samples(res["_dir"])
        cells[entry["name"]] = res
    return run_dir, cells, proc.stdout


@pytest.mark.e2e
def test_every_cell_completes_on_the_same_devices(peers):
    _, cells, _ = peers
    assert tuple(cells) == CELLS
    for name, res in cells.items():
        assert res["status"] == "complete", (name, res["error"])
        assert res["devices"] == 2 and len(res["iterations"]) == ITERATIONS
    for name in TRL:  # one pinned process per core, one thread, as sync's ranks
        placed = [p for p in cells[name]["placement"] if p["role"] == "colocated"]
        assert [p["observed"]["threads"] for p in placed] == [1, 1]
        assert sorted(p["observed"]["affinity"][0] for p in placed) == sorted(
            p["observed"]["affinity"][0] for p in cells["sync"]["placement"] if p["role"] == "colocated")
        assert cells[name]["switches"]["engine"] == "trl"
        # in the run's session, as rlbench's workers: the scheduler shares a busy core between sessions
        assert {p["observed"]["session"] for p in placed} == {cells[name]["external"]["session"]}


@pytest.mark.e2e
def test_trl_runs_as_resolved_with_every_cost_setting_equal_or_listed(peers):
    """What TRL resolved in the run itself (its trainer's args, every field): no activation checkpointing, no
    autocast, continuous batching only in trl_cb, and no cost setting differs without a listed difference."""
    _, cells, _ = peers
    for name in TRL:
        ext = cells[name]["external"]
        # activation_checkpointing: transformers >= 5.2x's name (5.17 has gradient_checkpointing alone)
        assert len(ext["trl_args"]) > 150 and ext["trl_args"].get("activation_checkpointing", False) is False
        assert ext["trl_args"]["gradient_checkpointing"] is False and ext["model_facts"]["checkpointing"] is False
        assert ext["trl_args"]["use_transformers_continuous_batching"] is (name == "trl_cb")
        assert set(ext["rlbench_args"]) == set(ext["trl_args"])  # every field diffed against the translation's
        assert ext["model_facts"]["attn_implementation"] == "sdpa"
        assert [r for r in ext["cost_settings"] if not r["equal"] and not r["listed_as"]] == []
        assert not [w for w in cells[name]["warnings"] if "cost setting" in w]
    assert cells["trl_cb"]["switches"]["continuous_batching"] is True
    assert cells["trl"]["switches"]["continuous_batching"] is False


@pytest.mark.e2e
def test_trl_trains_the_same_prompts_per_iteration(peers):
    """Both engines train each iteration's prompts x G samples, the same prompts (by length and index)."""
    _, cells, _ = peers
    def prompts(res):
        return sorted({(s["iteration"], s["prompt"], s["prompt_len"]) for s in res["_samples"]})
    g = cells["sync"]["config"]["rollout"]["group_size"]
    for name in TRL:
        assert prompts(cells[name]) == prompts(cells["sync"])
        for it in cells[name]["iterations"]:
            assert it["num_samples"] == cells["sync"]["config"]["train"]["prompts_per_iteration"] * g


@pytest.mark.e2e
def test_tpspd_is_rlbench_formula_over_the_step_window(peers):
    """tokens = prompt + response tokens of the trained samples (TRL's own counter agrees); TPSPD = tokens /
    (window x devices); the window holds every stage event of the iteration and no evaluation."""
    _, cells, _ = peers
    for name in TRL:
        res = cells[name]
        evals = [e for e in res["_events"] if e["stage"] == "eval"]
        assert {e["iteration"] for e in evals} == {0, ITERATIONS}
        for it in res["iterations"]:
            rows = [s for s in res["_samples"] if s["iteration"] == it["iteration"]]
            assert it["tokens"] == sum(s["prompt_len"] + s["response_len"] for s in rows)
            assert it["external"]["num_tokens"] == it["tokens"] and it["external"]["tokens_agree"]
            assert it["tpspd"] == pytest.approx(it["tokens"] / (it["wall_s"] * it["devices"]))
            work = [e for e in res["_events"] if e["iteration"] == it["iteration"] and e["stage"] != "eval"]
            assert min(e["start"] for e in work) >= it["start"] - 1e-6
            assert max(e["end"] for e in work) <= it["end"] + 1e-6
            for e in evals:
                assert e["end"] <= it["start"] or e["start"] >= it["end"]


@pytest.mark.e2e
def test_stages_under_rlbench_names(peers):
    """On-policy TRL skips the old-policy pass; with 2 steps per generation it computes it, and its samples
    are trained at most one version late (staleness 1), where on-policy cells train at 0."""
    _, cells, _ = peers
    on, off = cells["trl"], cells["trl_off_policy"]
    for res in (on, off):
        for it in res["iterations"]:
            assert {"rollout", "reward", "ref_logprob", "update", "optimizer_step"} <= set(it["stage_s"])
    assert all("old_logprob" not in it["stage_s"] for it in on["iterations"])
    assert all(it["stage_s"].get("old_logprob", 0) > 0 for it in off["iterations"])
    assert on["aggregates"]["staleness_max"] == 0 and off["aggregates"]["staleness_max"] == 1
    assert {s["trained_version"] - s["behaviour_version"] for s in off["_samples"]} == {0, 1}


@pytest.mark.e2e
def test_accuracy_by_rlbench_evaluation(peers):
    _, cells, _ = peers
    for name in TRL:
        evals = cells[name]["evals"]
        assert [e["iteration"] for e in evals] == [0, ITERATIONS]
        assert evals[0]["n"] == cells["sync"]["evals"][0]["n"]
        assert evals[0]["accuracy"] == cells["sync"]["evals"][0]["accuracy"]  # the same initial weights, greedy


@pytest.mark.e2e
def test_peers_table_and_report(peers):
    """peers.csv: the stage deltas against sync add up to the difference of the totals; the terminal and
    report.html show the section."""
    import pandas as pd

    run_dir, cells, stdout = peers
    frame = pd.read_csv(run_dir / "peers.csv")
    assert list(frame["cell"]) == list(CELLS)
    for _, r in frame.iterrows():
        parts = sum(r[c] for c in frame.columns if c.endswith("_vs_sync") and c != "total_vs_sync")
        assert parts == pytest.approx(r["total_vs_sync"], abs=1e-9)
        assert r["total_s_per_ktok"] == pytest.approx(
            1000 * sum(it["wall_s"] * it["devices"] for it in cells[r["cell"]]["iterations"][1:])
            / sum(it["tokens"] for it in cells[r["cell"]]["iterations"][1:]))
    assert "Against a real framework" in stdout and "Against a real framework" in (run_dir / "report.html").read_text()
    assert frame.set_index("cell").loc["sync", "vs_sync"] == 1.0
    from rlbench.reports import compare  # a TRL cell folder is read like any cell's
    _, text = compare(run_dir / "sync", run_dir / "trl")
    assert "tpspd_median" in text and "accuracy_after" in text


def test_refusals_exit_2_before_anything_runs(tmp_path):
    """A setting TRL cannot honour names its key; nothing is written."""
    proc = cli("--engine", "trl", "--set", "train.kl_type=kl", "--out", str(tmp_path))
    assert proc.returncode == 2 and "train.kl_type" in proc.stderr
    # 3 prompts x G=4 = 12 samples: 2 ranks x 2 per micro-batch, but not x 2 steps per generation
    proc = cli("--ablation", "peers", "--set", "train.prompts_per_iteration=3", "--out", str(tmp_path))
    assert proc.returncode == 2 and "train.ppo_mini_batches=2" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_missing_trl_is_one_clear_error(monkeypatch):
    import importlib.util

    from rlbench.engines.external.trl import adapter
    from rlbench.core.errors import UserError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    with pytest.raises(UserError, match=r"pip install .*rlbench\[trl\].*missing here: trl$"):
        adapter.require_trl()
