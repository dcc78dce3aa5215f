"""The statistics behind `rlbench check` (bench/check/stats.py) and its sensitivity study
(`rlbench check --calibrate`, bench/check/calibrate.py), on hand-written run folders."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlbench.check import calibrate as check_calibrate, stats as check_stats
from rlbench.core.results import schema
from support.check_runs import ASYNC, SYNC, Cell, write_run


def test_trimmed_mean_ignores_a_stray_iteration():
    x = [0.0, 0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.0, 3.0]  # one iteration hit by something else
    mean, se = check_stats.trimmed(x)
    assert abs(mean) < 0.01 and se < 0.01
    assert check_stats.trimmed([1.0, 2.0])[1] == math.inf  # too few to judge


def test_calibrate_measures_between_run_spread():
    """Runs whose level differs by more than their within-run error: a run-level spread (run_sd) and
    inflation c > 1; runs that differ only by their iterations' noise: run_sd near 0. The baseline value
    is the mean over runs."""
    rng = np.random.default_rng(0)
    quiet = [{"m": list(0.1 + 0.01 * rng.standard_normal(40))} for _ in range(5)]
    shifted = [{"m": list(0.1 + off + 0.01 * rng.standard_normal(40))} for off in (-0.03, 0.0, 0.03, -0.02, 0.02)]
    (base_q, c_q), (base_s, c_s) = check_stats.calibrate(quiet), check_stats.calibrate(shifted)
    (v_q, se_q, sd_q), (v_s, se_s, sd_s) = base_q["m"], base_s["m"]
    assert v_q == pytest.approx(math.exp(0.1), rel=0.01) and c_q < 2 and sd_q < 0.005
    assert c_s > 5 and se_s > 3 * se_q and sd_s == pytest.approx(0.025, abs=0.01)


def test_verdict_direction_and_interval():
    base = {"value": 1.0, "se": 0.01, "direction": "lower_is_better", "tolerance": 0.02}
    slower = {"samples": {"log_ratios": list(math.log(1.1) + 0.01 * np.sin(np.arange(30)))}}
    mark, ci, _ = check_stats.verdict(base, slower, check_stats.DEFAULTS)
    assert mark == "worse" and ci[0] < 0.10 < ci[1]
    faster = {"samples": {"log_ratios": list(-math.log(1.1) + 0.01 * np.sin(np.arange(30)))}}
    assert check_stats.verdict(base, faster, check_stats.DEFAULTS)[0] == "better"


def test_effect_of_a_planted_slowdown_on_each_metric():
    e = check_calibrate.effect
    assert e("stage_cost:update:+periodic_async/sync", "update", {"+periodic_async"}) == 1
    assert e("stage_cost:update:+shared_prompt/+tri_model", "update", {"+shared_prompt", "+tri_model"}) == 0
    assert e("stage_cost:weight_sync:+periodic_async/sync", "update", {"+periodic_async"}) == 0
    assert e("queue_cost:+tri_model", "handoff", {"+tri_model"}) == 1
    assert e("queue_cost:+tri_model", "queue_wait", {"+tri_model"}) == 0
    assert e("queue_cost:+periodic_async,+tri_model", "handoff", {"+tri_model"}) == 1  # pooled over async cells
    assert e("speedup:+periodic_async/sync", "iteration", {"+periodic_async"}) == -1
    assert e("accuracy:sync", "iteration", {"sync"}) == 0


def test_study_counts_detections_and_false_alarms(tmp_path):
    """Quiet, consistent runs: a 20% slower async update is found nearly always, unchanged runs almost
    never fail, and a real run with a planted slowdown is reported with what it flagged."""
    runs = [write_run(tmp_path / f"u{i}", [Cell("sync", SYNC, 100.0, noise=0.01),
                                          Cell("+periodic_async", ASYNC, 200.0, noise=0.01)], seed=i)
            for i in range(4)]
    planted = write_run(tmp_path / "p", [Cell("sync", SYNC, 100.0, noise=0.01),
                                         Cell("+periodic_async", ASYNC, 200.0, noise=0.01, slow={"update": 0.2})],
                        seed=9)
    res_path = planted / "plus_periodic_async" / schema.RESULTS
    res = json.loads(res_path.read_text())
    res_path.write_text(json.dumps({**res, "planted_slowdown": {"update": 0.2}}))
    res = check_calibrate.study([*runs, planted], pseudo_runs=10)
    assert res["runs"] == 4 and res["targets"]["async trainer update"] == ["stage_cost:update:+periodic_async/sync"]
    hit, n = res["detect"]["async trainer update"][0.20]
    assert n == 40 and hit >= 36
    flagged, trials = res["false_alarms"]
    assert trials == 80 and flagged <= 8
    assert res["detect_direct"]["async trainer update"][0.20] == (4, 4)  # each held-out run, as measured
    assert res["false_alarms_direct"][1] == 4 and res["false_alarms_direct"][0] <= 1
    assert res["real"][0][2] and "stage_cost:update:+periodic_async/sync" in res["real"][0][2]
    assert len(res["held_out"]) == 4
    text = check_calibrate.format_study(res)
    assert "| async trainer update (stage_cost:update:+periodic_async/sync) |" in text and "False alarms" in text
    assert "as measured 4/4" in text


def test_cli_calibrate_and_update_from_several_runs(tmp_path, monkeypatch, capsys):
    import sys

    from rlbench import cli

    runs = [str(write_run(tmp_path / f"u{i}", [Cell("sync", SYNC, 100.0), Cell("+periodic_async", ASYNC, 200.0)],
                          seed=i)) for i in range(3)]
    monkeypatch.setattr(sys, "argv", ["rlbench", "check", *runs, "--calibrate"])
    with pytest.raises(SystemExit) as ex:
        cli.main()
        sys.exit(0)
    assert (ex.value.code or 0) == 0
    assert "| async trainer update" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["rlbench", "check", *runs, "--update", "--baseline", str(tmp_path / "b.json")])
    with pytest.raises(SystemExit) as ex:
        cli.main()
        sys.exit(0)
    assert (ex.value.code or 0) == 0 and "from 3 run(s)" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["rlbench", "check", *runs, "--baseline", str(tmp_path / "b.json")])
    with pytest.raises(SystemExit) as ex:
        cli.main()
        sys.exit(0)
    assert ex.value.code == 2 and "check compares one run" in capsys.readouterr().err
