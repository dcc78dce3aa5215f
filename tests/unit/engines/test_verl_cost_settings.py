"""VERL at its fastest fair setting: every cost setting of the config VERL resolves from rlbench's CPU command equals
rlbench's, or names a listed difference (engines/external/verl/cost_settings.py); one left at VERL's default is
caught. The config is resolved by VERL's own Hydra composition in its venv (scripts/verl_check.py)."""
from __future__ import annotations

import json

import pytest

from rlbench.core.config_files import build_config
from rlbench.engines.external.verl import command, cost_settings
from support.venvs import live, run_verl_py


def resolved(tmp_path, cfg, **changes) -> dict:
    extra = {**command.cpu_overrides(cfg, 2, tmp_path / "tok"), **changes}
    argv = command.verl_command(cfg, tmp_path / "t.parquet", tmp_path / "v.parquet", tmp_path / "m.jsonl", 2,
                                max_prompt_length=256, extra=extra)
    return json.loads(run_verl_py("scripts/verl_check.py", "command", stdin=json.dumps(argv)).splitlines()[-1])["config"]


def cpu_cfg():
    return build_config({"model": {"kind": "hf", "path": "/m"}, "engine": {"compile": "off"}})


@live
def test_verl_on_cpu_costs_what_rlbench_does_but_for_the_listed_differences(tmp_path):
    cfg = cpu_cfg()
    rows = cost_settings.compare(resolved(tmp_path, cfg), cfg)
    assert cost_settings.unlisted(rows) == []
    listed = {r["setting"]: r["listed_as"] for r in rows if not r["equal"]}
    assert listed == {"generation engine": cost_settings.GENERATION}  # padding: both off on this config
    # VERL's own defaults where the translation sets none (one composition with all three): each is caught
    defaults = {"actor_rollout_ref.model.enable_gradient_checkpointing": True,
                "actor_rollout_ref.actor.use_torch_compile": True, "actor_rollout_ref.actor.fsdp_config.dtype": "bfloat16"}
    unlisted = cost_settings.unlisted(cost_settings.compare(resolved(tmp_path, cfg, **defaults), cfg))
    assert [u.split(":")[0] for u in unlisted] == ["activation (gradient) checkpointing", "torch.compile",
                                                   "training dtype"]


def test_a_config_never_written_fails_the_check():
    assert cost_settings.unlisted(cost_settings.compare(None, cpu_cfg())) == [
        "VERL's resolved config: VERL 'not written', rlbench 'needed'"]
