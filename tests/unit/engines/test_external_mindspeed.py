"""MindSpeed-RL adapter: YAML config, command, log parsing; checked against MindSpeed-RL's own code.

tests/fixtures/external/mindspeed_grpo.log was produced by MindSpeed-RL's Loggers/Metric/compute_tps
(README there). The `live` tests re-run that code (MINDSPEED_RL_HOME = a checkout, plus the VERL venv
for torch/ray/hydra) and skip without them.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rlbench.core.config_files import build_config
from rlbench.engines.external import mindspeed as ms
from rlbench.core.errors import UserError

from conftest import ROOT
FIX = ROOT / "tests" / "fixtures" / "external"
LOG = FIX / "mindspeed_grpo.log"
META = json.loads((FIX / "mindspeed_fixture_meta.json").read_text())
PY = Path(os.environ.get("RLBENCH_VERL_PYTHON", ROOT / ".venv-verl" / "bin" / "python"))
HOME = os.environ.get(ms.HOME_ENV, "")
live = pytest.mark.skipif(not (PY.is_file() and Path(HOME, "mindspeed_rl").is_dir()),
                          reason=f"needs {ms.HOME_ENV} (a MindSpeed-RL checkout) and the venv of "
                          "scripts/setup_verl.sh: MindSpeed-RL's own code not available")


def cfg(**train):
    return build_config({"model": {"kind": "hf", "path": "/models/Qwen2.5-7B"},
                         "rollout": {"group_size": 8, "max_new_tokens": 1024, "temperature": 0.8},
                         "train": {"prompts_per_iteration": 32, "micro_batch_size": 4, "lr": 1e-6,
                                   "kl_coef": 0.001, **train},
                         "run": {"iterations": 20, "seed": 3}})


def fixture_cfg():
    return build_config({"model": {"kind": "hf", "path": "/m"}, "rollout": {"group_size": META["n_samples_per_prompt"]},
                         "train": {"prompts_per_iteration": META["global_batch_size"], "micro_batch_size": 1},
                         "run": {"iterations": META["iterations"], "warmup_iterations": 1}})


def test_config_has_mindspeed_layout_and_values():
    c = ms.mindspeed_config(cfg(ppo_mini_batches=2), "/data/gsm8k", 16, max_prompt_length=512)
    assert list(c) == ["defaults", "megatron_training", "actor_config", "rl_config", "generate_config"]
    assert c["defaults"] == [{"model": ["qwen25_7b"]}]
    m, a, rl, g = c["megatron_training"], c["actor_config"], c["rl_config"], c["generate_config"]
    assert (m["global_batch_size"], m["seq_length"], m["train_iters"], m["data_path"], m["seed"]) == \
        (32, 512 + 1024, 20, "/data/gsm8k", 3)
    assert m["tokenizer_name_or_path"] == "/models/Qwen2.5-7B" and m["stage"] == "ray_grpo"
    assert (a["micro_batch_size"], a["lr"], a["clip_grad"]) == (4, 1e-6, 1.0)
    assert (rl["n_samples_per_prompt"], rl["mini_batch_size"], rl["init_kl_coef"], rl["kl_penalty"]) == \
        (8, 16, 0.001, "low_var_kl")  # mini_batch_size is in prompts (RLConfig multiplies by n)
    assert rl["actor_resource"] == {"num_npus": 16} and rl["use_integrated_worker"] is True
    assert g["sampling_config"]["max_tokens"] == 1024 and g["sampling_config"]["temperature"] == 0.8
    assert g["max_model_len"] >= m["seq_length"]  # validate_rl_args refuses otherwise
    with pytest.raises(UserError, match="ppo_mini_batches"):
        ms.mindspeed_config(cfg(ppo_mini_batches=3), "/d", 8)


def test_command_and_yaml(tmp_path):
    import yaml

    path = ms.write_mindspeed_config(ms.mindspeed_config(cfg(), "/d", 8), tmp_path / "rlbench_grpo.yaml")
    assert yaml.safe_load(path.read_text())["rl_config"]["n_samples_per_prompt"] == 8
    argv = ms.mindspeed_command(path, home="/opt/MindSpeed-RL", python="python3")
    assert argv == ["python3", "/opt/MindSpeed-RL/cli/train_grpo.py", "--config-dir", str(tmp_path),
                    "--config-name", "rlbench_grpo"]


def test_parse_log_line_reads_loggers_format():
    line = ("2026-01-01 00:00:00,000 - INFO - [2026-01-01 00:00:00] iteration: 3 / 10 | timing/all : 12.5000 | "
            "actor/lr : 1.000000e-06 | e2e_tps : 220.1234 ")
    assert ms.parse_log_line(line) == (3, 10, {"timing/all": 12.5, "actor/lr": 1e-6, "e2e_tps": 220.1234})
    assert ms.parse_log_line("(train pid=42) " + line)[0] == 3  # behind Ray's worker prefix
    assert ms.parse_log_line("[2026] INFO sync start grpo training at iteration: 0/10 ...") is None


def test_parse_fixture_into_rlbench_schema(tmp_path):
    from rlbench.core.results.schema import RESULTS, atomic_write_json, load_cell
    from rlbench.run.cell import CellRun

    res = ms.parse_mindspeed_log(LOG, fixture_cfg(), META["world_size"], version="05a90d7")
    check_against_log(res, LOG.read_text())
    assert res["cell"] == "mindspeed-rl" and res["provenance"] == {"framework": "mindspeed-rl", "version": "05a90d7"}
    assert res["evals"] == [] and res["aggregates"]["accuracy_after"] is None
    assert set(CellRun(fixture_cfg(), tmp_path / "own", "sync").results()) <= set(res)
    atomic_write_json(tmp_path / "ms" / RESULTS, res)
    assert load_cell(tmp_path / "ms")["aggregates"]["tpspd"]["n"] == META["iterations"] - 1
    assert ms.parse_mindspeed_log(LOG.read_text(), fixture_cfg(), META["world_size"])["iterations"] == res["iterations"]


def check_against_log(res: dict, text: str) -> None:
    """Records agree with the logged values; rlbench's TPSPD agrees with MindSpeed-RL's e2e_tps."""
    logged = [p[2] for p in map(ms.parse_log_line, text.splitlines()) if p]
    assert [it["iteration"] for it in res["iterations"]] == list(range(META["iterations"])) and len(logged) == 4
    samples = META["global_batch_size"] * META["n_samples_per_prompt"]
    for it, m in zip(res["iterations"], logged):
        assert it["num_samples"] == samples and it["wall_s"] == m["timing/all"]
        assert it["tokens"] == pytest.approx((m["prompt_length/mean"] + m["response_length/mean"]) * samples)
        # e2e_tps was computed from unrounded values, the log shows 4 decimals: agree to ~1e-3
        assert it["tpspd"] == pytest.approx(m["e2e_tps"], rel=2e-3)
        assert it["external"]["tpspd_check"]["agree"] is True
        assert it["stage_s"]["rollout"] == m["timing/rollout"] and it["stage_s"]["update"] == m["timing/update"]
        assert it["stage_s"]["weight_sync"] == pytest.approx(m["timing/resharding_to_infer"] +
                                                             m["timing/resharding_to_train"])
        assert it["reward_mean"] == m["grpo/score/mean"] and it["grad_norm"] == m["actor/grad_norm"]
    assert res["warnings"] == [] and res["status"] == "complete"


def test_wrong_device_count_is_flagged_and_cut_log_is_incomplete():
    res = ms.parse_mindspeed_log(LOG, fixture_cfg(), META["world_size"] + 2)
    assert len(res["warnings"]) == META["iterations"]
    cut = "\n".join(LOG.read_text().splitlines()[:3])
    part = ms.parse_mindspeed_log(cut, fixture_cfg(), META["world_size"])
    assert len(part["iterations"]) == 2 and part["status"] == "incomplete"


def test_run_mindspeed_without_checkout_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.delenv(ms.HOME_ENV, raising=False)
    with pytest.raises(UserError) as e:
        ms.run_mindspeed(cfg(), tmp_path)
    assert "MINDSPEED_RL_HOME" in str(e.value) and "not found in this environment" in str(e.value)
    monkeypatch.setenv(ms.HOME_ENV, str(tmp_path))  # a folder that is not a checkout
    with pytest.raises(UserError, match="needs a MindSpeed-RL checkout"):
        ms.run_mindspeed(cfg(), tmp_path)


def run_py(*args: str) -> str:
    out = subprocess.run([str(PY), *args], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, ms.HOME_ENV: HOME})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@live
def test_live_mindspeed_regenerates_log_and_accepts_config(tmp_path):
    run_py("scripts/make_mindspeed_fixture.py", "fixture", str(tmp_path))
    text = (tmp_path / "mindspeed_grpo.log").read_text()
    check_against_log(ms.parse_mindspeed_log(text, fixture_cfg(), META["world_size"]), text)
    path = ms.write_mindspeed_config(ms.mindspeed_config(cfg(ppo_mini_batches=2), "/d", 8),
                                     tmp_path / "rlbench_grpo.yaml")
    got = json.loads(run_py("scripts/make_mindspeed_fixture.py", "check-config", str(path)).splitlines()[-1])
    assert (got["global_batch_size"], got["n_samples_per_prompt"], got["mini_batch_size"]) == (32, 8, 16 * 8)
    assert (got["max_tokens"], got["num_npus"], got["init_kl_coef"]) == (1024, 8, 0.001)


def test_tpspd_is_never_e2e_tps_under_its_default_max_lengths():
    """MindSpeed-RL's default (rl_config.log_max_throughput=True) logs e2e_tps from the batch's maximum lengths:
    rlbench's TPSPD stays the token counts' (mean lengths), e2e_tps is checked against the max-length formula,
    and read as the mean-based figure it would be a disagreement on every iteration."""
    log = FIX / "mindspeed_grpo_max.log"
    res = ms.parse_mindspeed_log(log, fixture_cfg(), META["world_size"], log_max_throughput=True)
    assert res["warnings"] == [] and len(res["iterations"]) == META["iterations"]
    for it in res["iterations"]:
        ext = it["external"]
        tokens_tpspd = it["tokens"] / (it["wall_s"] * it["devices"])
        assert it["tpspd"] == pytest.approx(tokens_tpspd, rel=1e-12)
        assert ext["e2e_tps"] > it["tpspd"] * 1.2  # max lengths: far above the token counts' rate
        assert ext["tpspd_check"]["agree"] is True and "maximum lengths" in ext["tpspd_check"]["basis"]
    as_means = ms.parse_mindspeed_log(log, fixture_cfg(), META["world_size"])
    assert len(as_means["warnings"]) == META["iterations"]
