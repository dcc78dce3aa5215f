"""rlbench.simulate: the schedules over the report's per-device model, calibration and validation
against the report, the paper preset, the CLI.

Fast and torch-free: result folders come from tests/support/report_runs.py (as in test_reports.py).
"""
from __future__ import annotations

import json
import math
import random
import statistics
import sys

import pytest
import typer
from typer.testing import CliRunner

from support.report_runs import make_ablation, make_cell
from rlbench.core.errors import UserError
from rlbench.simulate import (Costs, calibrate, format_text, paper_setting, parse_list, rescale, run_simulation,
                              simulate, validate)
from rlbench.cli import simulate as simulate_command


def costs(**kw) -> Costs:
    base = dict(decode_a_s=0.01, decode_b_s=0.0, max_num_seqs=64, train_s_per_token=1e-4,
                optimizer_step_s=0.05, weight_sync_s=0.1)
    return Costs(**{**base, **kw})


def samples(prompts=16, g=4, length=None, tail=False, seed=0) -> list[dict]:
    rng = random.Random(seed)
    rows = [{"prompt": p, "sample": j, "prompt_len": 20, "response_len": length or rng.randint(10, 40)}
            for p in range(prompts) for j in range(g)]
    if tail:
        rows[3 * g]["response_len"] = 400
    return rows


def batches(c: Costs | None = None, n=2, **kw) -> list:
    return [(c or costs()).batch(samples(seed=i, **kw), 4) for i in range(n)]


# ---------------------------------------------------------------- the schedules


def test_sync_is_the_data_parallel_model():
    bs = batches(tail=True)
    res = simulate(bs, "sync", 2, 2)
    walls = [b.sync_time(4)[0] for b in bs]  # 4 colocated ranks, each its shard
    assert res.per_iteration_s == walls and res.devices == 4
    assert res.tpspd == pytest.approx(sorted(b.tokens / (w * 4) for b, w in zip(bs, walls))[0] / 2
                                      + sorted(b.tokens / (w * 4) for b, w in zip(bs, walls))[1] / 2)


def test_long_tail_async_beats_sync_and_the_barrier():
    bs = batches(costs(train_s_per_token=2e-3), tail=True)
    sync = simulate(bs, "sync", 2, 2)
    pa = simulate(bs, "periodic_async", 2, 2)
    barrier = simulate(bs, "periodic_async", 2, 2, overlap=False)
    assert pa.tpspd > sync.tpspd and pa.iter_s < barrier.iter_s and not barrier.overlap


def test_bounded_k0_is_periodic_async_iteration_by_iteration():
    bs = batches(costs(train_s_per_token=1e-3), n=1, tail=True)
    k0 = simulate(bs, "bounded_async", 3, 2, staleness=0, iterations=6)
    pa = simulate(bs, "periodic_async", 3, 2)
    assert k0.iter_s == pytest.approx(pa.iter_s, rel=1e-12) and k0.staleness_max == 0
    k1 = simulate(bs, "bounded_async", 3, 2, staleness=1)
    assert k1.tpspd >= k0.tpspd and k1.staleness_max == 1  # running ahead hides the rollout tail


def test_weak_scaling_keeps_each_device_at_its_measured_load():
    bs = batches(tail=True)
    for b in bs:
        b.n = 2  # as if measured on 2 sync ranks
    for d in (2, 4, 8):
        scaled = [rescale(b, d) for b in bs]
        assert all(len(s.samples) == len(b.samples) * d // 2 for s, b in zip(scaled, bs))
        # data-parallel sync: every rank gets a copy of a measured rank's shard, so time and TPSPD stay
        assert [s.sync_time(d)[0] for s in scaled] == pytest.approx([b.sync_time(2)[0] for b in bs], rel=1e-12)


def test_bad_simulate_arguments():
    with pytest.raises(UserError, match="schedule"):
        simulate(batches(), "nope", 1, 1)
    with pytest.raises(UserError, match=">= 1 device"):
        simulate(batches(), "sync", 0, 1)
    with pytest.raises(UserError, match="staleness"):
        simulate(batches(), "bounded_async", 1, 1, staleness=-1)


# ---------------------------------------------------------------- calibration and validation


def test_calibrate_is_the_reports_measurements(tmp_path):
    abl = make_ablation(tmp_path / "abl")
    bs, cell = calibrate(abl)
    assert cell["cell"] == "sync" and len(bs) == 3  # the warm-up iteration is left out
    # conftest: training phases 0.57 s per iteration over the sync cell's executed work (padded micro-batches)
    from rlbench.core.costmodel.work import train_tokens, train_work
    work = train_work(bs[0].samples, False, bs[0].micro_batch)
    assert bs[0].c_tok == pytest.approx(0.57 / work, rel=1e-9)
    assert work > train_tokens(bs[0].samples, False)  # responses of a group differ in length: padding counts
    assert bs[0].s_per_token() == pytest.approx(0.57 / train_tokens(bs[0].samples, False), rel=1e-9)
    assert bs[0].opt == pytest.approx(0.05) and bs[0].ws == pytest.approx(0.05) and bs[0].g == 4


# A hand computation of the model on the fixture's cells (tests/support/report_runs.py), written from the
# fixture's constants, not from the code under test. The sync cell's 8 prompts x G=4 fit the 32 slots at
# once, so response j ends after len_j - 1 decode steps and the iteration's rollout is the longest one; the
# fixture has no step table, so a decode step costs the measured rollout seconds over those steps. One
# micro-batch of 4 per group runs [4, prompt + its longest response]; training costs the measured 0.57 s
# over that work. The async cell (1 rollout worker, 1 trainer rank) gets each group when its longest
# response ends and trains them in arrival order; its iteration: 2 weight syncs + the trainer + the step.
WS = OPT = 0.05


def hand(k: int) -> dict:
    """Iteration k of the fixture: tokens, sync and async seconds as the model must predict them."""
    from support.report_runs import PROMPT_LEN, STEP_S, TRAIN_S, lengths

    lens = lengths(k)
    longest = max(max(row) for row in lens)
    step_s = longest * STEP_S / (longest - 1)
    per_work = sum(TRAIN_S.values()) / sum(4 * (PROMPT_LEN + max(row)) for row in lens)
    trainer = 0.0
    for at, cost in sorted(((max(row) - 1) * step_s, per_work * 4 * (PROMPT_LEN + max(row))) for row in lens):
        trainer = max(trainer, at) + cost
    tokens = sum(PROMPT_LEN + n for row in lens for n in row)
    return {"tokens": tokens, "sync_s": WS + longest * STEP_S + sum(TRAIN_S.values()) + OPT,
            "async_s": 2 * WS + trainer + OPT}


def test_validate_matches_a_hand_computation(tmp_path):
    """Every row of validate() against the hand computation and the raw iterations of the result files: the
    sync row in-sample, the periodic-async prediction, both measured speedups, a bounded k=0 cell (its
    rate over the iterations is periodic asynchrony's timeline) and k=1 never slower than k=0."""
    from rlbench.core.results import schema

    abl = make_ablation(tmp_path / "abl")
    for name, k in (("k0", 0), ("k1", 1)):
        folder = make_cell(abl / name, name, "bounded_async")
        res = json.loads((folder / schema.RESULTS).read_text())
        res["config"]["engine"]["max_staleness"] = k
        schema.atomic_write_json(folder / schema.RESULTS, res)
        meta = json.loads((abl / schema.ABLATION).read_text())
        meta["cells"].append({"name": name, "dir": name, "exit_code": 0, "switches": {
            "schedule": "bounded_async", "tri_model": False, "shared_prompt": False}})
        schema.atomic_write_json(abl / schema.ABLATION, meta)
    rows = {r["cell"]: r for r in validate(abl)}
    its = (1, 2, 3)  # the measured iterations (iteration 0 is the warm-up)
    h = [hand(k) for k in its]
    sync_tpspd = statistics.median(x["tokens"] / (x["sync_s"] * 2) for x in h)
    assert rows["sync"]["predicted_tpspd"] == pytest.approx(sync_tpspd, rel=1e-9)
    assert rows["periodic_async"]["predicted_tpspd"] == pytest.approx(
        statistics.median(x["tokens"] / (x["async_s"] * 2) for x in h), rel=1e-9)
    assert rows["k0"]["predicted_tpspd"] == pytest.approx(
        sum(x["tokens"] for x in h) / (2 * sum(x["async_s"] for x in h)), rel=1e-9)
    assert rows["k1"]["predicted_tpspd"] >= rows["k0"]["predicted_tpspd"]
    assert rows["k0"]["predicted_from"] == rows["k1"]["predicted_from"] == "sync"  # on its sync twin's costs
    measured = {c: statistics.median(it["tpspd"] for it in json.loads(
        (abl / c / schema.RESULTS).read_text())["iterations"] if it["iteration"] in its) for c in rows}
    assert measured["sync"] == pytest.approx(sync_tpspd, rel=1e-9)  # the fixture is its own model's replay
    for c, r in rows.items():
        assert r["measured_tpspd"] == pytest.approx(measured[c], rel=1e-12)
        assert r["measured_speedup"] == pytest.approx(measured[c] / measured["sync"], rel=1e-12)
        assert r["predicted_speedup"] == pytest.approx(r["predicted_tpspd"] / measured["sync"], rel=1e-12)
        assert r["error"] == pytest.approx(r["predicted_tpspd"] / measured[c] - 1, rel=1e-9)


def test_simulate_at_the_measured_split_is_the_hand_computation(tmp_path):
    bs, _ = calibrate(make_ablation(tmp_path / "abl"))
    res = simulate(bs, "periodic_async", 1, 1)  # the fixture's async cell: 1 + 1 devices
    assert res.per_iteration_s == pytest.approx([hand(k)["async_s"] for k in (1, 2, 3)], rel=1e-9)
    assert simulate(bs, "periodic_async", 1, 1, overlap=False).tpspd < res.tpspd  # the tail: overlap pays


def test_calibrate_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        calibrate(tmp_path / "missing")
    make_cell(tmp_path / "only_async", "periodic_async", "periodic_async")
    with pytest.raises(UserError, match="no sync cell"):
        calibrate(tmp_path / "only_async")


# ---------------------------------------------------------------- paper preset, sweep, CLI


def test_paper_preset_predicts_a_speedup():
    p = paper_setting(devices=16)
    rows = {r["variant"]: r for r in p["rows"]}
    sync, pa = rows["sync (colocated, data-parallel)"], rows["periodic_async (best split)"]
    assert sync["speedup"] == 1.0 and pa["speedup"] > 1.0 and pa["tpspd"] > sync["tpspd"] > 0
    opt = rows["periodic_async + tri_model + shared_prompt"]
    assert opt["tpspd"] > pa["tpspd"]  # cheaper training only helps
    assert {f["speedup"] for f in p["paper_figures"]} >= {2.0, 3.12}
    assert 250 < p["workload"]["response_len_mean"] < 350 and p["workload"]["response_len_max"] <= 2048
    sens = [s["async_speedup"] for s in p["sensitivity_train_throughput"]]
    assert len(sens) >= 3 and all(math.isfinite(s) for s in sens)


def test_parse_list():
    assert parse_list("8, 16,32", int, "--devices") == [8, 16, 32]
    assert parse_list("0.25,0.5", float, "--rollout-share") == [0.25, 0.5]
    assert parse_list(None, int, "--devices") is None
    for text, kind in [("8;16", int), ("8,,16", int), ("1,8", int), ("0.5,1.0", float), ("a", float)]:
        with pytest.raises(UserError):
            parse_list(text, kind, "--x")


def test_run_simulation_from_run(tmp_path):
    abl = make_ablation(tmp_path / "abl")
    res = run_simulation(abl, devices=[4, 8], shares=[0.5])
    out = abl / "simulate"
    saved = json.loads((out / "simulate.json").read_text())
    assert saved["validation"] and {r["devices"] for r in saved["rows"]} == {4, 8}
    assert {r["schedule"] for r in saved["rows"]} == {"sync", "periodic_async", "bounded_async"}
    partial = [r for r in saved["rows"] if r["partial_rollout"]]  # one per device count and split
    assert len(partial) == 2 and {r["schedule"] for r in partial} == {"bounded_async"}
    assert "partial rollout" in format_text(res)
    # nothing fitted: every calibrated cost is a measured quantity of the fixture's sync cell
    for b, k in zip(saved["calibration"]["per_batch"], (1, 2, 3)):
        from support.report_runs import STEP_S, lengths
        longest = max(max(row) for row in lengths(k))
        assert b["decode_step_fallback_s"] == pytest.approx(longest * STEP_S / (longest - 1), rel=1e-9)
        assert (b["weight_sync_s"], b["optimizer_step_s"]) == pytest.approx((WS, OPT), rel=1e-9)
        assert b["tokens"] == hand(k)["tokens"]
    for name in ("tpspd_vs_devices.png", "tpspd_vs_share.png", "calibration.json"):
        assert (out / name).stat().st_size > 0
    assert (out / "tpspd_vs_devices.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(res["best_split"]) == 2


def test_run_simulation_bad_input(tmp_path):
    with pytest.raises(UserError, match="RUN_DIR"):
        run_simulation(None, None)
    with pytest.raises(UserError, match="preset"):
        run_simulation(None, "paper-70b")
    with pytest.raises(UserError, match="not found"):
        run_simulation(tmp_path / "nope")


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command("simulate")(simulate_command)

    @app.command()
    def other() -> None:  # a second command, so that "simulate" is a sub-command as in rlbench
        pass
    return app


def test_cli_preset_and_run(tmp_path):
    runner = CliRunner()
    r = runner.invoke(_app(), ["simulate", "--preset", "paper-7b", "--devices", "16",
                               "--rollout-share", "0.5", "--out", str(tmp_path / "sim")])
    assert r.exit_code == 0, r.output
    assert "paper setting" in r.output and "periodic_async" in r.output and "~2x" in r.output
    saved = json.loads((tmp_path / "sim" / "simulate.json").read_text())
    assert saved["devices"] == [16] and saved["paper"]["rows"]
    abl = make_ablation(tmp_path / "abl")
    r = runner.invoke(_app(), ["simulate", str(abl), "--devices", "4"])
    assert r.exit_code == 0, r.output
    assert "the run's own cells" in r.output and (abl / "simulate" / "simulate.json").is_file()


def test_cli_bad_input_is_a_user_error(tmp_path):
    runner = CliRunner()
    for args, msg in [(["simulate", str(tmp_path / "none")], "not found"),
                      (["simulate", "--preset", "paper-7b", "--devices", "8;16"], "--devices"),
                      (["simulate", "--preset", "paper-7b", "--rollout-share", "2"], "--rollout-share")]:
        r = runner.invoke(_app(), args)
        assert isinstance(r.exception, UserError) and msg in str(r.exception), (args, r.output)
    r = runner.invoke(_app(), ["simulate", "--preset", "paper-7b", "--exponent", "1"])
    assert r.exit_code == 2 and "--exponent" in r.output  # removed: nothing is fitted or assumed


def test_no_torch_import():
    import subprocess
    code = ("import sys, rlbench.simulate as s; s.paper_setting(devices=8); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_removed_exponent_option_exits_2_through_the_real_cli():
    from support.cli import rlbench

    proc = rlbench("simulate", "--preset", "paper-7b", "--exponent", "1")
    assert proc.returncode == 2 and "No such option: --exponent" in proc.stderr, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
