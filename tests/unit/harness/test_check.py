"""`rlbench check`: regression verdicts against a baseline, on result folders written by hand
(tests/support/check_runs.py); the baseline file itself: test_check_baseline.py."""
from __future__ import annotations

import json
import sys

import pytest

from support.check_runs import (ASYNC, SPEEDUP, SYNC, Cell, async_run, baseline,  # noqa: F401  (baseline: a fixture)
                        row, write_run)
from rlbench.check import verdicts as chk
from rlbench.core.errors import UserError
from rlbench.core.results import metric_table, schema

UPDATE_COST = "stage_cost:update:periodic_async/sync"
PAIRED = {SPEEDUP, UPDATE_COST, "stage_cost:weight_sync:periodic_async/sync", "queue_cost:periodic_async"}


def test_metrics_of_a_run(tmp_path):
    m = chk.compute_metrics(async_run(tmp_path / "r", overhead=0.05))["metrics"]
    assert set(m) == PAIRED | {"same_accuracy:periodic_async/sync", "same_start:periodic_async/sync", "overhead_share:sync",
                               "overhead_share:periodic_async", "accuracy:sync", "accuracy:periodic_async",
                               "reward:sync", "reward:periodic_async"}
    assert m[SPEEDUP]["value"] == pytest.approx(2.0, rel=0.06)
    assert len(m[SPEEDUP]["samples"]["log_ratios"]) == 6  # warm-up iterations excluded, paired by iteration
    assert m[UPDATE_COST]["value"] == pytest.approx(0.5, rel=0.06)  # twice the TPSPD: half the update time
    assert (m[UPDATE_COST]["kind"], m[UPDATE_COST]["direction"]) == ("cost", "lower_is_better")
    # handoff CPU / reward CPU of the same iteration
    assert m["queue_cost:periodic_async"]["value"] == pytest.approx(0.01, rel=0.06)
    assert m["overhead_share:sync"]["value"] == pytest.approx(0.05, abs=1e-9)
    assert m["accuracy:periodic_async"] == {**m["accuracy:periodic_async"], "value": 0.40, "kind": "accuracy"}
    assert m["same_accuracy:periodic_async/sync"]["value"] == 0.0
    assert m["same_start:periodic_async/sync"]["value"] == 0.0


def every_pair_run(path):
    """Cells that pair on every switch, one pair (async_gain) away from the reference."""
    tri = {**ASYNC, "tri_model": True}
    return write_run(path, [Cell("sync", SYNC, 100.0), Cell("+periodic_async", ASYNC, 200.0),
                            Cell("+tri_model", tri, 220.0),
                            # how it packs is recorded where it packs: it comes with the switch
                            Cell("+shared_prompt", {**tri, "shared_prompt": True, "shared_prompt_impl": "dense"},
                                 275.0),
                            Cell("sync+tri_model", {**SYNC, "tri_model": True}, 110.0)])


def test_switch_gains(tmp_path):
    m = chk.compute_metrics(every_pair_run(tmp_path / "r"))["metrics"]
    assert m["tri_model_gain:+tri_model/+periodic_async"]["value"] == pytest.approx(1.1, rel=0.08)
    assert m["shared_prompt_gain:+shared_prompt/+tri_model"]["value"] == pytest.approx(1.25, rel=0.08)
    assert m["async_gain:+tri_model/sync+tri_model"]["value"] == pytest.approx(2.0, rel=0.08)
    assert m["speedup:sync+tri_model/sync"]["value"] == pytest.approx(1.1, rel=0.08)
    # pairs with the reference are speedup rows only, not repeated as gains
    assert not {"async_gain:+periodic_async/sync", "tri_model_gain:sync+tri_model/sync"} & set(m)
    # component costs exist for every pair, the reference's included
    assert {"stage_cost:update:+periodic_async/sync", "stage_cost:update:+shared_prompt/+tri_model",
            "stage_cost:update:sync+tri_model/sync", "stage_cost:weight_sync:+tri_model/sync+tri_model"} <= set(m)


def test_check_computes_the_metric_families_the_table_declares(tmp_path):
    """Every metric family `rlbench check` computes, against a baseline or (`--against`) the old tree, is a
    CHECK row of core/results/metric_table.py, and every CHECK row is computed."""
    from rlbench.check import ab, baseline, metrics

    run = every_pair_run(tmp_path / "r")
    computed = {*chk.compute_metrics(run)["metrics"], *ab.paired_metrics(run, run)}
    declared = metric_table.CHECK_FAMILIES
    assert {metric_table.family(n) for n in computed} == set(declared)
    assert {*metrics.GAIN_NAMES.values(), *baseline.METRIC_TOLERANCES} <= set(declared)
    for row in declared.values():
        assert row.kind in metric_table.CHECK_KINDS and row.direction in metric_table.DIRECTIONS, row.name
        assert row.seeds in ("pooled", "mean", "worst", "each") and row.unit and row.what, row.name


def test_identical_run_passes(tmp_path, baseline):
    result = chk.check(async_run(tmp_path / "again"), baseline)  # same seed: same numbers
    assert result.exit_code == 0
    assert all(r.mark != "worse" for r in result.rows)
    assert format_last_line(result).startswith("PASS: 12 metric(s) compared")


def format_last_line(result) -> str:
    return chk.format_check(result).splitlines()[-1]


def test_planted_regression_fails(tmp_path, baseline):
    result = chk.check(async_run(tmp_path / "slow", speedup=1.5, seed=1), baseline)  # 2.0x -> 1.5x
    assert result.exit_code == 1
    r = row(result, SPEEDUP)
    assert r.mark == "worse" and r.change == pytest.approx(-0.25, abs=0.06)
    assert {x.mark for x in result.rows} <= set(chk.MARKS)
    assert r.ci[1] < 0 < r.ci[1] + 0.25  # the interval of the relative change rules out noise
    assert result.verdict.startswith("FAIL: ") and "speedup:periodic_async/sync -2" in result.verdict
    text = chk.format_check(result)
    assert "worse" in text and text.endswith(result.verdict)


def test_slower_component_is_named_with_its_interval(tmp_path, baseline):
    """The async trainer's update 30% slower (its iteration too): the update's cost row fails and the
    failure says which stage, of which cells, by how much, with the interval; weight sync does not."""
    run = write_run(tmp_path / "r", [Cell("sync", SYNC, 100.0), Cell("periodic_async", ASYNC, 200.0,
                                                                     slow={"update": 0.30})], seed=4)
    result = chk.check(run, baseline)
    r = row(result, UPDATE_COST)
    assert r.mark == "worse" and r.change == pytest.approx(0.30, abs=0.08) and r.ci[0] > 0
    assert row(result, "stage_cost:weight_sync:periodic_async/sync").mark == "not significant"
    line = next(x for x in result.verdict.splitlines() if UPDATE_COST in x)
    assert "update (gradient pass" in line and "95% interval of the change [+" in line


def test_slower_queue_path_is_flagged(tmp_path, baseline):
    run = write_run(tmp_path / "r", [Cell("sync", SYNC, 100.0), Cell("periodic_async", ASYNC, 200.0,
                                                                     slow={"handoff": 0.20})])
    result = chk.check(run, baseline)
    r = row(result, "queue_cost:periodic_async")
    assert r.mark == "worse" and r.change == pytest.approx(0.20, abs=0.08) and result.exit_code == 1


def test_queue_cost_pools_the_async_cells(tmp_path):
    """One queue_cost row over every cell with a hand-off (they share the queue path): its samples are
    the iterations, each summing the cells' handoff and reward CPU seconds."""
    tri = {**ASYNC, "tri_model": True}
    run = write_run(tmp_path / "r", [Cell("sync", SYNC, 100.0), Cell("periodic_async", ASYNC, 200.0),
                                     Cell("+tri_model", tri, 220.0)])
    m = chk.compute_metrics(run)["metrics"]
    q = m["queue_cost:periodic_async,+tri_model"]
    assert q["cells"] == ["periodic_async", "+tri_model"] and len(q["samples"]["log_ratios"]) == 6
    assert not [k for k in m if k.startswith("queue_cost:") and k != "queue_cost:periodic_async,+tri_model"]


def test_improvement_is_better_not_a_failure(tmp_path, baseline):
    result = chk.check(async_run(tmp_path / "fast", speedup=2.6, seed=1), baseline)
    assert row(result, SPEEDUP).mark == "better" and result.exit_code == 0


def test_accuracy_drop_fails(tmp_path, baseline):
    result = chk.check(async_run(tmp_path / "dumb", accuracy=0.20), baseline)
    assert row(result, "accuracy:periodic_async").mark == "worse"
    assert row(result, "accuracy:periodic_async").ci is None  # no samples: the tolerance decides
    assert result.exit_code == 1


def test_accuracy_is_loose_across_machines_but_the_invariant_is_strict(tmp_path, baseline):
    """Both cells 0.05 lower (another machine's summation order): passes; periodic-async alone 1/64
    lower than sync: summation-order drift, passes; 3/64 lower: the invariant fails although both
    accuracies are within the loose tolerance."""
    moved = write_run(tmp_path / "m", [Cell("sync", SYNC, 100.0, accuracy=0.35),
                                       Cell("periodic_async", ASYNC, 200.0, accuracy=0.35)])
    assert chk.check(moved, baseline).exit_code == 0
    drift = write_run(tmp_path / "d", [Cell("sync", SYNC, 100.0), Cell("periodic_async", ASYNC, 200.0,
                                                                      accuracy=0.40 - 1 / 64)])
    assert row(chk.check(drift, baseline), "same_accuracy:periodic_async/sync").mark == "not significant"
    split = write_run(tmp_path / "s", [Cell("sync", SYNC, 100.0), Cell("periodic_async", ASYNC, 200.0,
                                                                      accuracy=0.40 - 3 / 64)])
    result = chk.check(split, baseline)
    assert row(result, "accuracy:periodic_async").mark == "not significant"
    assert row(result, "same_accuracy:periodic_async/sync").mark == "worse" and result.exit_code == 1


def test_small_change_is_not_significant(tmp_path, baseline):
    """A 3% change on 3% per-iteration noise and 6 iterations is inside the noise."""
    result = chk.check(async_run(tmp_path / "tiny", speedup=1.94, seed=2), baseline)
    assert row(result, SPEEDUP).mark == "not significant" and result.exit_code == 0


def test_noise_decides(tmp_path):
    """The same 4% drop is a regression on quiet samples, noise on noisy ones."""
    for noise, expected in ((0.002, "worse"), (0.15, "not significant")):
        base = async_run(tmp_path / f"base{noise}", noise=noise)
        path = chk.write_baseline(base, tmp_path / f"b{noise}.json", tolerances={"ratio": 0.01})
        result = chk.check(async_run(tmp_path / f"run{noise}", speedup=1.92, seed=3, noise=noise), path)
        assert row(result, SPEEDUP).mark == expected, (noise, row(result, SPEEDUP))


def test_calibrated_baseline_from_several_runs(tmp_path):
    """Several unchanged runs: the value is their mean, the stored se and the inflation come from their
    spread; a run of the same config passes against it."""
    runs = [async_run(tmp_path / f"u{i}", seed=10 + i) for i in range(4)]
    path = chk.write_baseline(runs, tmp_path / "cal.json")
    data = json.loads(path.read_text())
    assert data["statistics"]["runs"] == 4 and data["statistics"]["inflation"] >= 1.0
    sp = data["metrics"][SPEEDUP]
    assert sp["se"] > 0 and sp["run_sd"] >= 0 and len(sp["samples"]["log_ratios"]) == 24 and sp["value"] == pytest.approx(2.0, rel=0.03)
    assert chk.check(async_run(tmp_path / "again", seed=20), path).exit_code == 0


def test_failed_cell_fails(tmp_path, baseline):
    run = write_run(tmp_path / "r", [Cell("sync", SYNC, 100.0), Cell("periodic_async", ASYNC, 200.0, status="failed")])
    result = chk.check(run, baseline)
    assert row(result, "status:periodic_async").mark == "worse" and result.exit_code == 1
    (run / "sync" / schema.RESULTS).unlink()  # a cell that never wrote results.json
    result = chk.check(run, baseline)
    # a metric of the missing cell is lost, not skipped
    assert row(result, "status:sync").current == "missing" and row(result, SPEEDUP).mark == "worse"
    with pytest.raises(UserError, match="every cell complete and nothing planted"):
        chk.write_baseline(run, tmp_path / "b2.json")


def test_parse_tolerances():
    assert chk.parse_tolerances(["ratio=0.2", "accuracy:sync=0.05"]) == {"ratio": 0.2, "accuracy:sync": 0.05}
    with pytest.raises(UserError, match="--tolerance"):
        chk.parse_tolerances(["ratio"])


def test_cli_exit_codes(tmp_path, baseline, monkeypatch, capsys):
    """Through `rlbench check` once the command is wired into the CLI."""
    from rlbench import cli

    if "check" not in {c.name or c.callback.__name__ for c in cli.app.registered_commands}:
        pytest.skip("`rlbench check` is not wired into rlbench.cli yet")
    slow = async_run(tmp_path / "slow", speedup=1.5, seed=1)
    for argv, code in ((["check", str(tmp_path / "base"), "--baseline", str(baseline)], 0),
                       (["check", str(slow), "--baseline", str(baseline)], 1),
                       (["check", str(slow), "--baseline", str(tmp_path / "nope.json")], 2)):
        monkeypatch.setattr(sys, "argv", ["rlbench", *argv])
        with pytest.raises(SystemExit) as ex:
            cli.main()
            sys.exit(0)
        assert (ex.value.code or 0) == code, capsys.readouterr()


def test_different_first_rewards_break_the_invariant(tmp_path, baseline):
    """Iteration 0 of sync and periodic-async samples from the same weights with the same seeds: any
    difference in its rewards is a bug (sampling, seeding, reward), flagged however small."""
    run = async_run(tmp_path / "r")
    path = run / "periodic_async" / schema.RESULTS
    res = json.loads(path.read_text())
    res["iterations"][0]["reward_mean"] += 1 / 32
    path.write_text(json.dumps(res))
    result = chk.check(run, baseline)
    assert row(result, "same_start:periodic_async/sync").mark == "worse" and result.exit_code == 1


def test_a_multi_seed_run_is_checked_per_seed_and_pooled(tmp_path, baseline):
    """`--seeds` cells (`<cell>@seed<s>`): metrics are paired within each seed, then pooled under the
    one-seed names, so a multi-seed run checks against the same baseline with more samples."""
    cells = [Cell(f"{name}@seed{s}", sw, tps) for s in (0, 1)
             for name, sw, tps in (("sync", SYNC, 100.0), ("periodic_async", ASYNC, 200.0))]
    run = write_run(tmp_path / "seeds", cells)
    m = chk.compute_metrics(run)
    assert set(m["cells"]) == {"sync", "periodic_async"} and m["reference"] == "sync"
    assert len(m["metrics"][SPEEDUP]["samples"]["log_ratios"]) == 12  # 6 measured iterations x 2 seeds
    assert m["metrics"][SPEEDUP]["value"] == pytest.approx(2.0, rel=0.06)
    assert "same_start:periodic_async/sync" in m["metrics"]
    result = chk.check(run, baseline)
    assert row(result, SPEEDUP).mark == "not significant" and result.exit_code == 0
