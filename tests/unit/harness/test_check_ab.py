"""`rlbench check --against`'s judgement (bench/check/ab.py) on A/B folders written by hand: the old and
the new tree's runs of the same cells (tests/support/check_runs.py's realistic cell folders). A slowdown of code
every cell runs must fail here although every between-cell ratio stays put; a metric the new tree lost
fails; an unchanged pair passes."""
from __future__ import annotations

import json

import pytest
from conftest import TESTS
from support.check_runs import ASYNC, SYNC, Cell, row, write_run
from support.cli import rlbench

from rlbench.check import ab as check_ab, ab_power as check_ab_power, confirm, one_cell, stats as check_stats
from rlbench.planted.slowdown import STAGES
from rlbench.core.results import schema


def cells(**kw):
    return [Cell("sync", SYNC, 100.0, **kw), Cell("periodic_async", ASYNC, 200.0, **kw)]


def ab_folder(path, seed_new=1, planted=None, commit="c0ffee", new_cells=None, **new_kw):
    """An A/B folder as `rlbench check --against` writes it (ab.json, old/<run>, new/<run>); the new tree's
    cells: new_cells, else cells(**new_kw)."""
    path.mkdir(parents=True)
    write_run(path / "old" / "run", cells(), seed=0)
    write_run(path / "new" / "run", new_cells or cells(**new_kw), seed=seed_new)
    schema.atomic_write_json(path / "ab.json", {"kind": "ab", "against": "HEAD", "old_commit": commit,
                                                "new_commit": commit, "planted": planted or {}})
    return path


def test_unchanged_trees_pass(tmp_path):
    ab = ab_folder(tmp_path / "ab")
    res = check_ab.compare(ab / "old" / "run", ab / "new" / "run", "HEAD")
    assert res.exit_code == 0, res.verdict
    names = {r.metric for r in res.rows}
    assert {"tpspd:sync", "tpspd:periodic_async", "cost:update", "cost:rollout", "cost:handoff",
            "speedup:periodic_async/sync", "same_start:periodic_async/sync", "accuracy:sync"} <= names
    assert row(res, "cost:update").mark == "not significant"
    assert len(check_ab.paired_metrics(ab / "old" / "run", ab / "new" / "run")["cost:update"]["log_ratios"]) == 12


def test_shared_code_slowdown_fails_although_between_cell_ratios_hold(tmp_path):
    """The update 20% slower in every cell: each cell's update cost per token rises; sync vs async
    (what a stored baseline of between-cell ratios compares) does not move."""
    ab = ab_folder(tmp_path / "ab", seed_new=0, slow={"update": 0.2})
    res = check_ab.compare(ab / "old" / "run", ab / "new" / "run", "HEAD")
    assert res.exit_code == 1
    r = row(res, "cost:update")  # pooled over both cells
    assert r.mark == "worse" and r.change == pytest.approx(0.2, rel=1e-6)
    assert row(res, "stage_cost:update:periodic_async/sync").mark == "not significant"
    assert "cost:update +20.0%" in res.verdict and "gradient pass" in res.verdict


def test_a_faster_tree_is_better_not_a_failure(tmp_path):
    ab = ab_folder(tmp_path / "ab", seed_new=0, slow={"rollout": -0.3})
    res = check_ab.compare(ab / "old" / "run", ab / "new" / "run", "HEAD")
    assert res.exit_code == 0 and row(res, "cost:rollout").mark == "better"


def test_a_metric_lost_in_the_new_tree_fails(tmp_path):
    ab = ab_folder(tmp_path / "ab")
    events = ab / "new" / "run" / "periodic_async" / schema.EVENTS
    events.write_text("".join(l + "\n" for l in events.read_text().splitlines() if '"handoff"' not in l))
    res = check_ab.compare(ab / "old" / "run", ab / "new" / "run", "HEAD")
    r = row(res, "cost:handoff")
    assert (r.mark, res.exit_code) == ("worse", 1) and "missing in the new one" in r.note


def test_a_cell_that_failed_in_the_new_tree_fails(tmp_path):
    ab = ab_folder(tmp_path / "ab", status="failed")
    res = check_ab.compare(ab / "old" / "run", ab / "new" / "run", "HEAD")
    assert res.exit_code == 1 and row(res, "status:sync").mark == "worse"


def test_paired_verdict_needs_evidence():
    rng = [0.1 + 0.01 * (-1) ** i for i in range(40)]  # +10.5%, tight
    assert check_ab.judge_paired(rng, "lower_is_better")[0] == "worse"
    assert check_ab.judge_paired(rng, "higher_is_better")[0] == "better"
    assert check_ab.judge_paired([0.03] * 40, "lower_is_better")[0] == "not significant"  # under the 5% floor
    noisy = [0.1, -0.2, 0.4]  # +10% on average, three iterations: far too few to tell
    assert check_ab.judge_paired(noisy, "lower_is_better")[0] == "not significant"


def test_t_quantiles_and_the_upper_bound():
    assert check_stats.t_quantile(1.96, 10) == pytest.approx(2.228, abs=0.005)
    assert check_stats.t_quantile(1.96, 30) == pytest.approx(2.042, abs=0.005)
    assert check_stats.t_quantile(3.0, 1e9) == pytest.approx(3.0)
    assert check_ab_power.upper_bound(0, 20) == pytest.approx(1 - 0.05 ** (1 / 20), abs=1e-6)
    assert check_ab_power.upper_bound(1, 20) == pytest.approx(0.2161, abs=1e-3)


def test_cli_judges_an_ab_folder_again(tmp_path):
    ab = ab_folder(tmp_path / "ab", seed_new=0, slow={"optimizer_step": 0.25})
    proc = rlbench("check", ab)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cost:optimizer_step +25.0%" in proc.stdout and "optimizer step" in proc.stdout
    assert json.loads((ab / "ab.json").read_text())["verdict"]["exit_code"] == 1


def test_power_study_from_ab_folders(tmp_path):
    runs = [ab_folder(tmp_path / f"u{i}", seed_new=10 + i) for i in range(3)]
    runs.append(ab_folder(tmp_path / "p", seed_new=0, planted={"RLBENCH_SLOW": "update:0.3"}, slow={"update": 0.3}))
    res = check_ab_power.study(runs)
    assert res["runs"] == 3 and all(code == 0 for _, (code, _) in res["end_to_end"])
    assert res["detect"]["gradient pass (update)"][0.20] == (3, 3)
    ((_, planted, flagged, one_cell_hit),) = res["planted"]
    assert planted == {"RLBENCH_SLOW": "update:0.3"} and "cost:update" in flagged and one_cell_hit is None
    text = check_ab_power.format_study(res)
    assert "False alarms: 0/3" in text and "| gradient pass (update) (cost:update) |" in text
    # 3 unchanged runs and the planted one (its cells record no planted slowdown): one cell each, the first apart
    assert res["noise"]["startup"]["n"] == res["noise"]["startup (first cell)"]["n"] == 4
    assert res["noise"]["startup"]["over"] == 0 and res["noise"]["startup (first cell)"]["floor"] == 0.5


def test_one_cell_power_counts_only_the_slowed_cells_metrics(tmp_path):
    """A slowdown of one cell's work is detected through that cell's metrics only: shifted into unchanged
    runs, 20% in periodic_async is caught (its TPSPD, its share of the pooled costs, async/sync ratios);
    a real planted run (work:0.3@periodic_async) counts as detected when it flags one of them."""
    runs = [ab_folder(tmp_path / f"u{i}", seed_new=10 + i) for i in range(3)]
    runs.append(ab_folder(tmp_path / "p", seed_new=0, planted={"RLBENCH_SLOW": "work:0.3@periodic_async"},
                          new_cells=[Cell("sync", SYNC, 100.0), Cell("periodic_async", ASYNC, 200.0,
                                                                      slow={s: 0.3 for s in STAGES})]))
    res = check_ab_power.study(runs)
    assert res["one_cell"]["periodic_async"][0.20][0] == (3, 3)
    metrics = check_ab.paired_metrics(runs[0] / "old" / "run", runs[0] / "new" / "run")
    moved = one_cell.shift("periodic_async", 0.2)(metrics)[1]
    assert "tpspd:periodic_async" in moved and "tpspd:sync" not in moved and "cost:update" in moved
    assert "speedup:periodic_async/sync" in moved
    assert one_cell.shift("sync", 0.2)(metrics)[1] & {"speedup:periodic_async/sync", "tpspd:periodic_async"} == set()
    ((_, _, flagged, hit),) = res["planted"]
    assert hit is True and "tpspd:periodic_async" in flagged
    assert "Real planted runs RLBENCH_SLOW=work:0.3@periodic_async: 1/1" in check_ab_power.format_study(res)


@pytest.mark.parametrize("key, metric", [("startup_s", "startup:sync"), ("startup_cpu_s", "startup_cpu:sync"),
                                         ("first_iteration_s", "first_iteration:sync"),
                                         ("eval_s", "eval:sync"), ("peak_rss_mb", "peak_rss:sync:colocated0"),
                                         ("process_cpu", "process_cpu:sync:driver")])
def test_a_new_tree_whose_startup_evaluation_or_memory_doubles_fails(tmp_path, key, metric):
    ab = ab_folder(tmp_path / "ab", life={key: 2.0})
    res = _judge(ab)
    r = row(res, metric)
    assert (r.mark, res.exit_code) == ("worse", 1) and r.change == pytest.approx(1.0, abs=0.06)
    assert r.paired and confirm.needs_confirmation(res)  # a process's offset: a second run decides
    assert all(row(res, m).mark != "worse" for m in ("tpspd:sync", "cost:update"))  # the iterations did not move


def test_an_asynchronous_cells_start_up_cpu_is_judged_against_its_own_floor(tmp_path):
    """+10% start-up CPU: within the floor of a cell whose rollout overlaps its training (its warm-up
    round follows the old tree's same cell), beyond the floor of the others; +20% is beyond both."""
    res = _judge(ab_folder(tmp_path / "ten", life={"startup_cpu_s": 1.10}))
    assert row(res, "startup_cpu:periodic_async").mark == "not significant"
    assert row(res, "startup_cpu:periodic_async").change == pytest.approx(0.10, abs=0.02)
    res = _judge(ab_folder(tmp_path / "twenty", life={"startup_cpu_s": 1.20}))
    assert row(res, "startup_cpu:periodic_async").mark == "worse" and res.exit_code == 1


def test_evaluation_slower_in_every_cell_fails_on_the_pooled_metric_under_the_per_cell_floor(tmp_path):
    """+20% evaluation CPU in every cell: inside each cell's floor, beyond the pooled one (eval:all)."""
    res = _judge(ab_folder(tmp_path / "ab", life={"eval_s": 1.2}))
    assert row(res, "eval:sync").mark == "not significant" and row(res, "eval:all").mark == "worse"
    assert row(res, "eval:all").change == pytest.approx(0.2, abs=0.02) and res.exit_code == 1
    assert _judge(ab_folder(tmp_path / "same")).exit_code == 0


def test_a_metric_only_the_new_tree_has_is_shown_not_judged_and_one_it_lost_fails(tmp_path):
    """The accepted commit predates the lifecycle record: its metrics are new, not failures, until ACCEPTED
    moves past it. The other way round (the new tree stopped recording them) fails."""
    ab = ab_folder(tmp_path / "ab", life={"startup_s": 3.0})
    for cell in (ab / "old" / "run").iterdir():
        if cell.is_dir():
            res = json.loads((cell / schema.RESULTS).read_text())
            schema.atomic_write_json(cell / schema.RESULTS, {k: v for k, v in res.items() if k != "lifecycle"})
    res = _judge(ab)
    assert res.exit_code == 0 and row(res, "startup:sync").mark == "not comparable"
    assert "new metric" in row(res, "startup:sync").note and row(res, "eval:sync").mark == "not significant"
    lost = check_ab.compare(ab / "new" / "run", ab / "old" / "run", "HEAD")  # new and old swapped
    assert lost.exit_code == 1 and "missing in the new one" in row(lost, "peak_rss:sync:driver").note


def _judge(ab):
    return check_ab.compare(ab / "old" / "run", ab / "new" / "run", "HEAD")


def test_a_flag_the_second_run_does_not_repeat_is_not_a_regression(tmp_path):
    """First run: the rollout cost +10% (a per-process offset, say); second run: unchanged. Only paired
    metrics failed, so a second run decides, and it does not confirm: pass, naming both measurements."""
    first = _judge(ab_folder(tmp_path / "a", seed_new=0, slow={"rollout": 0.1}))
    second = _judge(ab_folder(tmp_path / "b"))
    assert first.exit_code == 1 and confirm.needs_confirmation(first)
    final = confirm.combine(first, second)
    assert final.exit_code == 0, final.verdict
    assert final.verdict.startswith("PASS") and "cost:rollout flagged in the first run (+10.0%" in final.verdict
    assert row(final, "cost:rollout").mark == "not significant"


def test_a_regression_both_runs_flag_fails_with_both_measurements(tmp_path):
    first = _judge(ab_folder(tmp_path / "a", seed_new=0, slow={"rollout": 0.1}))
    second = _judge(ab_folder(tmp_path / "b", seed_new=0, slow={"rollout": 0.2}))
    final = confirm.combine(first, second)
    assert final.exit_code == 1 and "confirmed by a second A/B run" in final.verdict
    assert ("cost:rollout: +10.0% [+10.0%, +10.0%] in the first run, +20.0% [+20.0%, +20.0%] in the second"
            in final.verdict)


def test_a_flag_only_in_the_second_run_is_not_confirmed_but_a_lost_cell_is_a_failure(tmp_path):
    first = _judge(ab_folder(tmp_path / "a", seed_new=0, slow={"update": 0.2}))
    second = _judge(ab_folder(tmp_path / "b", seed_new=0, slow={"rollout": 0.2}))
    final = confirm.combine(first, second)
    assert final.exit_code == 0 and "cost:rollout flagged only in the second run (+20.0%" in final.verdict
    failed = _judge(ab_folder(tmp_path / "c", status="failed"))
    assert not confirm.needs_confirmation(failed)  # a cell that did not complete fails at once
    assert confirm.combine(first, failed).exit_code == 1


def test_cli_judges_two_ab_folders_as_a_run_and_its_confirmation(tmp_path):
    a = ab_folder(tmp_path / "a", seed_new=0, slow={"rollout": 0.1})
    b = ab_folder(tmp_path / "b", seed_new=0, slow={"rollout": 0.1})
    c = ab_folder(tmp_path / "c")
    fail = rlbench("check", a, b)
    assert fail.returncode == 1 and "second A/B run (fresh processes), to confirm:" in fail.stdout
    assert json.loads((a / "ab.json").read_text())["confirmed_by"] == str(b.resolve())
    assert "cost:rollout" in json.loads((b / "ab.json").read_text())["combined_verdict"]["worse"]
    ok = rlbench("check", a, c)
    assert ok.returncode == 0 and ok.stdout.rstrip().splitlines()[-1].startswith("PASS: nothing flagged by both")


def test_a_first_run_whose_cell_failed_fails_although_the_second_is_clean(tmp_path):
    """`rlbench check AB1 AB2`: only paired metrics wait for a confirmation; a cell of the first run that did
    not complete (or a metric it lost) fails whatever the second run says."""
    a = ab_folder(tmp_path / "a", status="failed")
    b = ab_folder(tmp_path / "b")
    final = confirm.combine(_judge(a), _judge(b))
    assert final.exit_code == 1 and "status:sync (first A/B run)" in final.verdict
    proc = rlbench("check", a, b)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "status:sync (first A/B run)" in json.loads((a / "ab.json").read_text())["combined_verdict"]["worse"]


def test_a_cell_that_filled_a_cold_model_cache_is_not_compared_on_start_up(tmp_path):
    """The first side to set up the first cell warm-starts the model when the cache is cold (CI on a fresh
    machine): a one-time cost. Start-up and that cell process's peak memory are not compared there; the
    other cells' are."""
    ab = ab_folder(tmp_path / "ab", life={"startup_s": 3.0})
    path = ab / "old" / "run" / "sync" / schema.RESULTS
    schema.atomic_write_json(path, {**json.loads(path.read_text()), "model": {"cached": False}})
    res = _judge(ab)
    r = row(res, "startup:sync")
    assert r.mark == "not comparable" and "old tree warm-started the model" in r.note
    assert row(res, "peak_rss:sync:driver").mark == "not comparable"
    assert row(res, "startup:periodic_async").mark == "worse" and row(res, "eval:sync").mark == "not significant"


def test_verdicts_recorded_before_the_statistics_moved_to_scipy_do_not_change():
    """60 paired metrics (7-40 iterations, 20 of each mark) judged with the hand-written t quantile and
    trimmed mean, recorded in tests/fixtures/check_verdicts.json; scipy.stats gives the same marks."""
    import json

    stored = json.loads((TESTS / "fixtures" / "check_verdicts.json").read_text())["cases"]
    assert {c["mark"] for c in stored} == {"worse", "better", "not significant"}
    changed = [(len(c["log_ratios"]), c["mark"]) for c in stored
               if check_ab.judge_paired(c["log_ratios"], c["direction"])[0] != c["mark"]]
    assert not changed


def test_trimmed_mean_and_error_by_hand():
    """x = 1..10: 20% trimmed cuts 2 each end, mean of 3..8 = 5.5; winsorized 3,3,3..8,8,8: sd by hand."""
    import math

    mean, se = check_stats.trimmed(list(range(1, 11)))
    w = [3, 3, 3, 4, 5, 6, 7, 8, 8, 8]
    sd = math.sqrt(sum((v - 5.5) ** 2 for v in w) / 9)
    assert mean == pytest.approx(5.5) and se == pytest.approx(sd / (0.6 * math.sqrt(10)))
