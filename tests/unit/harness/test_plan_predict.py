"""`rlbench plan`'s predictions: from an rlbench sync cell they are the in-run prediction's own numbers; from
a framework's log they come with every assumption's source and range, an interval that holds the value,
the best of the swept splits, and output that fits 100 columns."""
from __future__ import annotations

import json
import math
import time

import pytest

from rlbench.analysis.intervals import EVEN, LOSES, WINS
from rlbench.core.costmodel.predict import predict_async
from rlbench.core.results import schema
from rlbench.plan.assume import STATED
from rlbench.plan.command import run_plan
from support.cli import rlbench
from support.plan_logs import verl_steps, write_trl_state, write_verl_console, write_verl_jsonl
from support.report_runs import make_ablation


def test_plan_from_results_json_is_the_in_run_prediction(tmp_path):
    run = make_ablation(tmp_path / "run")
    sync = schema.load_cell(run / "sync")
    samples, events = schema.load_samples(run / "sync"), schema.load_events(run / "sync")
    result = run_plan(run / "sync" / "results.json")
    rows = {r["label"]: r for r in result["rows"]}
    assert result["devices"] == 1 and result["assumptions"] == []  # its one colocated rank, as predict_async counts
    for label, overlap in (("periodic_async", True), ("barrier (split alone)", False)):
        want = predict_async(sync, samples, events, 1, 1, overlap=overlap)
        assert (rows[label]["rollout_devices"], rows[label]["train_devices"]) == (1, 1)
        assert rows[label]["tpspd"] == pytest.approx(want["predicted_tpspd"], rel=1e-9)
        assert rows[label]["speedup"] == pytest.approx(want["predicted_speedup"], rel=1e-9)


def test_plan_from_a_verl_log_states_assumptions_and_intervals(tmp_path):
    result = run_plan(write_verl_jsonl(tmp_path / "m.jsonl", verl_steps(30, gpus=8)))
    assert result["devices"] == 8 and result["format"] == "verl-jsonl"
    assert abs(result["model_check"]["error"]) < 0.05  # the rebuilt batches replay the logged steps
    sources = {a["name"]: a["source"] for a in result["assumptions"]}
    assert {a["key"] for a in result["assumptions"]} <= set(STATED)  # each can be stated with --assume
    assert sources["weight crossing between pools (s)"] == "measured in the log"
    assert sources["group size G"] == "default"
    for r in result["rows"]:
        assert r["low"] <= r["speedup"] <= r["high"]
        assert r["speedup"] == pytest.approx(math.sqrt(r["low"] * r["high"]), rel=1e-9)  # the range's centre
        assert r["outcome"] in (WINS, LOSES, EVEN)
        at = {c["rollout_devices"]: c["tpspd"] for c in r["curve"]}
        assert at[r["rollout_devices"]] == r["tpspd"] and max(at.values()) <= 1.15 * r["tpspd"]  # the best split
        assert set(r["assumption_effects"]) == set(sources)
    assert result["steps_used"][:2] == [4, 30] and result["warmup_dropped"] == [1, 2, 3]
    lad = result["ladder"]
    assert set(lad) == {"split", "overlap", "staleness", "partial rollout", "tri-model"}
    tri = result["rows"][-1]  # the best schedule without VERL's timing_s/old_log_prob pass
    assert tri["tri_model_of"] in {r["label"] for r in result["rows"][:-1]} and lad["tri-model"] > 1.0


def test_longer_tail_makes_the_split_cheaper(tmp_path):
    """The same generation seconds with a response tail twice as long: sync's devices idle more in the tail,
    so a smaller rollout pool costs less (the barrier's split factor rises)."""
    short, long = verl_steps(20, gpus=8), verl_steps(20, gpus=8)
    for r in long[1:]:
        r["response_length/max"] *= 2
    a = run_plan(write_verl_jsonl(tmp_path / "a.jsonl", short))["ladder"]["split"]
    b = run_plan(write_verl_jsonl(tmp_path / "b.jsonl", long))["ladder"]["split"]
    assert b > a * 1.03


def test_roofline_options_and_other_gpu_counts(tmp_path):
    log = write_verl_jsonl(tmp_path / "m.jsonl", verl_steps(12, gpus=8))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
                               "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064}))
    result = run_plan(log, model=cfg, device="H100")
    src = {a["name"]: a for a in result["assumptions"]}
    assert src["decode-step growth with the batch"]["source"] == "roofline"
    ws = src["weight crossing between pools (s)"]
    assert ws["source"] in ("roofline", "measured by `rlbench env` (NVIDIA H100)")
    assert ws["low"] <= ws["value"] <= ws["high"] and 0.1 < ws["value"] < 1.0  # 15 GB of bf16 weights
    big = run_plan(log, gpus=16)
    assert big["devices"] == 16 and any("weak scaling" in n for n in big["notes"])
    err = rlbench("plan", log, "--device", "Z80")
    assert err.returncode == 2 and "allowed" in err.stderr


def test_trl_plan_splits_the_step_by_the_stated_share(tmp_path):
    path = write_trl_state(tmp_path / "trainer_state.json", n=12)
    done = rlbench("plan", path)
    assert done.returncode == 2 and "--gpus" in done.stderr  # the file does not say how many GPUs
    result = run_plan(path, gpus=4)
    names = {a["name"] for a in result["assumptions"]}
    assert "rollout share of the step" in names


def test_an_assumption_the_user_states_replaces_the_default(tmp_path):
    """--assume train-speed=1.5: the split pools' trainer ranks 1.5x faster per device, its source the user's,
    no range of its own; the colocated sync (the model check) unchanged; every split prediction at least as
    fast, and the one a trainer bounds faster."""
    log = write_verl_jsonl(tmp_path / "m.jsonl", verl_steps(20, gpus=8))
    base, told = run_plan(log), run_plan(log, assume_items=["train-speed=1.5", "group-size=16"])
    stated = {a["name"]: a for a in told["assumptions"]}
    speed = stated["split pool's training speed per device"]
    assert (speed["value"], speed["low"], speed["high"], speed["source"]) == (1.5, 1.5, 1.5, "stated (--assume)")
    assert stated["group size G"]["value"] == 16
    assert told["model_check"]["predicted_tpspd"] == pytest.approx(base["model_check"]["predicted_tpspd"], rel=0.05)
    one = run_plan(log, assume_items=["train-speed=1.5"])
    assert one["model_check"]["predicted_tpspd"] == pytest.approx(base["model_check"]["predicted_tpspd"], rel=1e-9)
    before = {r["label"]: r for r in base["rows"]}
    after = {r["label"]: r for r in one["rows"]}
    assert all(after[k]["tpspd"] >= before[k]["tpspd"] * (1 - 1e-9) for k in before if k in after)
    assert max(after[k]["tpspd"] / before[k]["tpspd"] for k in before if k in after) > 1.05
    assert after["one_step_off"]["assumption_effects"]["split pool's training speed per device"] == [1.0, 1.0]


@pytest.mark.parametrize("item, says", [("speed=1.5", "NAME one of group-size"), ("train-speed=fast", "not a number"),
                                        ("decode-slope=2", "must be >= 0 and <= 1"),
                                        ("group-size=2.5", "a whole number")])
def test_a_malformed_assumption_exits_2_naming_it(tmp_path, item, says):
    log = write_verl_jsonl(tmp_path / "m.jsonl", verl_steps(8, gpus=4))
    done = rlbench("plan", log, "--assume", item)
    assert done.returncode == 2 and item in done.stderr and says in done.stderr, done.stderr


def test_nothing_to_assume_for_an_rlbench_cell_with_its_measurements(tmp_path):
    run = make_ablation(tmp_path / "run")
    done = rlbench("plan", run / "sync" / "results.json", "--assume", "train-speed=1.2")
    assert done.returncode == 2 and "nothing is assumed" in done.stderr, done.stderr


def test_cli_text_fits_100_columns_json_and_html(tmp_path):
    log = write_verl_console(tmp_path / "train.log", verl_steps(15, gpus=4))
    done = rlbench("plan", log, "--html", tmp_path / "plan.html")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Plan: on 4 devices")
    assert max(len(line) for line in done.stdout.splitlines()) <= 100
    widest = " ".join(done.stdout.split("Widest: ", 1)[1].split("\n\n")[0].split())  # the widest assumption
    assert "--assume " in widest and widest.split("--assume ")[1].split("=")[0] in STATED
    page = (tmp_path / "plan.html").read_text()
    assert "data:image/png;base64," in page and "Assumptions" in page and "Widest: " in page
    data = json.loads(rlbench("plan", log, "--json").stdout)
    assert data["kind"] == "plan" and len(data["rows"]) == 6  # five schedules, the best without old log-probs


def test_a_thousand_step_log_plans_quickly(tmp_path):
    log = write_verl_jsonl(tmp_path / "m.jsonl", verl_steps(1000, gpus=8))
    t = time.perf_counter()
    result = run_plan(log)
    assert time.perf_counter() - t < 10.0  # about 0.5 s after the imports, on 2 busy cores (docs/results/plan.md)
    assert result["steps_used"] == [4, 1000, 997]


def test_roofline_counts_dense_and_mixture_of_experts_parameters(tmp_path):
    from rlbench.plan.roofline import device, model_shape

    dense = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944, "vocab_size": 152064}
    moe = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
           "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
           "vocab_size": 151936}
    for cfg, billions in ((dense, 7.6), (moe, 30.5)):  # Qwen2.5-7B, Qwen3-30B-A3B as their cards state
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        assert model_shape(tmp_path).parameters / 1e9 == pytest.approx(billions, rel=0.02)
    assert device("NVIDIA H200").name == "H200" and device("h20").name == "H20"
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    done = rlbench("plan", write_verl_jsonl(tmp_path / "m.jsonl", verl_steps(6)), "--model", tmp_path)
    assert done.returncode == 2 and "num_hidden_layers" in done.stderr
    assert rlbench("plan", tmp_path / "m.jsonl", "--gpus", "0").returncode == 2


def test_a_host_copy_measured_by_rlbench_env_comes_before_the_datasheet(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path))
    (tmp_path / "peak.json").write_text(json.dumps({"x|cuda|threads=1": {
        "device": "NVIDIA H100 80GB HBM3", "host_copy_bytes_per_s": 20e9, "copy_bytes_per_s": 2e12}}))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
                               "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064}))
    log = write_verl_jsonl(tmp_path / "m.jsonl", verl_steps(8, gpus=8))
    ws = {a["name"]: a for a in run_plan(log, model=cfg, device="H100")["assumptions"]}[
        "weight crossing between pools (s)"]
    assert ws["source"] == "measured by `rlbench env` (NVIDIA H100 80GB HBM3)"
    assert ws["value"] == pytest.approx(7.6e9 * 2 / 20e9, rel=0.03)  # the weights' bytes over the probe's rate
    ws = {a["name"]: a for a in run_plan(log, model=cfg, device="A100")["assumptions"]}[
        "weight crossing between pools (s)"]
    assert ws["source"] == "roofline" and ws["value"] == pytest.approx(7.6e9 * 2 / 32e9, rel=0.03)
