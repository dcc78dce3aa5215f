"""`rlbench check`'s baseline file: written and read back, comparable or stale against a run's config,
malformed or missing (one clear error naming the file and key)."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from support.check_runs import SPEEDUP, async_run, baseline, row  # noqa: F401  (baseline: a fixture)
from rlbench.check import verdicts as chk
from rlbench.core.config import RunConfig
from rlbench.core.errors import UserError
from rlbench.core.results import metric_table


def test_the_stored_cpu_baseline_loads_with_declared_families():
    base = chk.load_baseline(ROOT / "bench" / "baselines" / "cpu-default.json")
    assert {metric_table.family(n) for n in base["metrics"]} <= set(metric_table.CHECK_FAMILIES)


def test_update_round_trip(tmp_path, baseline):
    data = json.loads(baseline.read_text())
    assert data["schema_version"] == 2 and data["config"]["reference_cell"] == "sync"
    assert data["config"]["cells"]["periodic_async"]["schedule"] == "periodic_async"
    assert data["config"]["reference"]["rollout"]["group_size"] == RunConfig().rollout.group_size
    assert data["provenance"]["git_commit"] == "abc123"
    assert data["statistics"]["runs"] == 1 and data["statistics"]["inflation"] == 1.0
    sp = data["metrics"][SPEEDUP]
    assert (sp["kind"], sp["direction"], sp["tolerance"]) == ("ratio", "higher_is_better", 0.05)
    assert len(sp["samples"]["log_ratios"]) == 6
    result = chk.check(tmp_path / "base", baseline)  # the very run the baseline came from
    assert result.exit_code == 0 and result.verdict.startswith("PASS")
    assert {r.mark for r in result.rows} == {"not significant"}


def test_different_config_is_not_comparable(tmp_path, baseline):
    run = async_run(tmp_path / "g8", speedup=1.2, overrides={"rollout": {"group_size": 16}})
    result = chk.check(run, baseline)
    r = row(result, SPEEDUP)
    assert r.mark == "not comparable" and "rollout.group_size" in r.note
    assert result.config_diff == [f"rollout.group_size: {RunConfig().rollout.group_size} -> 16"]
    assert result.exit_code == 2 and "STALE BASELINE: nothing comparable" in result.verdict  # never a silent pass


def test_key_newer_than_the_baseline_at_its_default_is_comparable(tmp_path, baseline):
    """A config key added to rlbench after the baseline was measured does not make it stale, unless
    the run moves it off its default."""
    data = json.loads(baseline.read_text())
    for cfg in [data["config"]["reference"], *data["config"]["cell_configs"].values()]:
        del cfg["engine"]["share_devices"]
        del cfg["rollout"]["top_p"]
    baseline.write_text(json.dumps(data))
    assert chk.check(async_run(tmp_path / "same"), baseline).config_diff == []
    moved = chk.check(async_run(tmp_path / "moved", overrides={"rollout": {"top_p": 0.9}}), baseline)
    assert moved.config_diff == ["rollout.top_p: - -> 0.9"]


def test_baseline_with_a_key_renamed_since_is_comparable(tmp_path, baseline):
    """Baselines and results written before engine.backend became engine.launcher read as the new name."""
    data = json.loads(baseline.read_text())
    configs = [data["config"]["reference"], *data["config"]["cell_configs"].values()]
    for cfg in configs:
        cfg["engine"]["backend"] = cfg["engine"].pop("launcher")
    baseline.write_text(json.dumps(data))
    run = async_run(tmp_path / "same")
    assert chk.check(run, baseline).config_diff == []
    for cfg in configs:
        cfg["engine"]["backend"] = "ray"
    baseline.write_text(json.dumps(data))
    assert chk.check(run, baseline).config_diff == ["engine.launcher: ray -> local"]


def test_run_name_does_not_matter(tmp_path, baseline):
    run = async_run(tmp_path / "renamed", overrides={"run": {"name": "other"}})
    assert all(r.mark != "not comparable" for r in chk.check(run, baseline).rows)


def test_update_keeps_hand_tuned_tolerances(tmp_path, baseline):
    data = json.loads(baseline.read_text())
    data["metrics"][SPEEDUP]["tolerance"] = 0.3
    baseline.write_text(json.dumps(data))
    chk.write_baseline(async_run(tmp_path / "new"), baseline)
    assert json.loads(baseline.read_text())["metrics"][SPEEDUP]["tolerance"] == 0.3


@pytest.mark.parametrize("breaker, key", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: json.dumps({k: v for k, v in d.items() if k != "metrics"}), "'metrics': missing"),
    (lambda d: json.dumps({**d, "metrics": {**d["metrics"], SPEEDUP: {**d["metrics"][SPEEDUP], "tolerance": "ten"}}}),
     f"metrics.{SPEEDUP}.tolerance"),
    (lambda d: json.dumps({**d, "schema_version": 99}), "'schema_version'"),
    (lambda d: json.dumps({**d, "metrics": {**d["metrics"], SPEEDUP: {**d["metrics"][SPEEDUP],
                                                                     "samples": {"numerator": [1.0]}}}}),
     f"metrics.{SPEEDUP}.samples"),
    (lambda d: json.dumps({**d, "metrics": {"x": {**d["metrics"][SPEEDUP], "direction": "up"}}}), "metrics.x.direction"),
])
def test_malformed_baseline_is_a_user_error(tmp_path, baseline, breaker, key):
    baseline.write_text(breaker(json.loads(baseline.read_text())))
    with pytest.raises(UserError) as err:
        chk.check(tmp_path / "base", baseline)
    assert str(baseline) in str(err.value) and key in str(err.value)


def test_missing_baseline_and_run(tmp_path, baseline):
    with pytest.raises(UserError, match="baseline file not found"):
        chk.check(tmp_path / "base", tmp_path / "nope.json")
    with pytest.raises(UserError, match="neither a run folder"):
        chk.check(tmp_path, baseline)
