"""`rlbench plan`'s log readers: each format read from a log the tests write from its documented keys
(tests/support/plan_logs.py), found by content, and a malformed log of each format refused with exit 2
naming the file, the line and the key."""
from __future__ import annotations

import json

import pytest

from rlbench.core.errors import UserError
from rlbench.plan.detect import read_log
from support.cli import rlbench
from support.plan_logs import (verl_steps, write_tensorboard, write_trl_state, write_verl_console,
                               write_verl_jsonl)
from support.report_runs import make_ablation


def _same_steps(a, b):
    assert [s.step for s in a.steps] == [s.step for s in b.steps]
    for x, y in zip(a.steps, b.steps):
        assert x.gen_s == pytest.approx(y.gen_s) and x.tokens == pytest.approx(y.tokens)
        assert x.train_s == pytest.approx(y.train_s) and x.wall_s == pytest.approx(y.wall_s)


def test_verl_file_logger_console_and_tensorboard_read_the_same_steps(tmp_path):
    rows = verl_steps(12, gpus=8)
    jl = read_log(write_verl_jsonl(tmp_path / "metrics.jsonl", rows))
    con = read_log(write_verl_console(tmp_path / "train.log", rows))
    tb = read_log(write_tensorboard(tmp_path / "tb", rows))
    assert (jl.format, con.format, tb.format) == ("verl-jsonl", "verl-console", "tensorboard")
    _same_steps(jl, con)
    _same_steps(jl, tb)
    s, d = jl.steps[0], rows[1]  # step 0 (validation only) is not a training step
    assert s.step == 1 and len(jl.steps) == 12
    assert s.gen_s == d["timing_s/gen"] and s.weight_sync_s == d["timing_s/update_weights"]
    assert s.train_s == pytest.approx(sum(d[f"timing_s/{k}"] for k in
                                          ("reward", "old_log_prob", "ref", "adv", "update_actor")))
    assert jl.devices == con.devices == tb.devices == 8  # from perf/throughput
    assert [x.step for x in jl.used][0] == 4 and jl.dropped == [1, 2, 3]  # rlbench's warm-up of 3
    assert "timing_s/update_weights" in jl.keys and "prompt_length/mean" in jl.keys


def test_trl_trainer_state_steps_tokens_from_the_cumulative_count(tmp_path):
    path = write_trl_state(tmp_path / "trainer_state.json", n=10, logging_steps=2)
    log = read_log(path)
    assert log.format == "trl" and len(log.steps) == 10 and log.steps[0].step == 2
    hist = json.loads(path.read_text())["log_history"]
    per_step = (hist[1]["num_tokens"] - hist[0]["num_tokens"]) / 2
    assert log.steps[1].tokens == pytest.approx(per_step)
    assert log.steps[0].gen_s is None and log.extra["train_batch_size"] == 16
    assert read_log(tmp_path).format == "trl"  # a checkpoint folder holding it


def test_rlbench_results_and_run_folder_use_the_sync_cells_measurements(tmp_path):
    run = make_ablation(tmp_path / "run")
    for path in (run, run / "sync", run / "sync" / "results.json"):
        log = read_log(path)
        assert log.format == "rlbench" and "samples" in log.extra and log.warmup == 1
    with pytest.raises(UserError, match="no synchronous cell"):
        read_log(run / "periodic_async" / "results.json")


def _error(*args) -> str:
    done = rlbench("plan", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    return done.stderr


def test_malformed_verl_jsonl_names_line_and_key(tmp_path):
    rows = verl_steps(6)
    del rows[4]["timing_s/gen"]
    path = write_verl_jsonl(tmp_path / "m.jsonl", rows)
    err = _error(path)
    assert f"{path}:5" in err and "timing_s/gen" in err and "VERL step 4" in err


def test_malformed_verl_console_names_line_and_key(tmp_path):
    rows = verl_steps(6)
    del rows[2]["perf/total_num_tokens"]
    path = write_verl_console(tmp_path / "train.log", rows)
    with pytest.raises(UserError, match=rf"{path}:4: .*perf/total_num_tokens"):
        read_log(path)
    path.write_text("step:1 - timing_s/step\n")  # a pair without its value
    with pytest.raises(UserError, match=rf"{path}:1: .*not key:value"):
        read_log(path)


def test_malformed_tensorboard_and_trl_and_results(tmp_path):
    rows = verl_steps(5)
    for r in rows:
        r.pop("response_length/mean", None)
    with pytest.raises(UserError, match="response_length/mean"):
        read_log(write_tensorboard(tmp_path / "tb", rows))
    bad = tmp_path / "events.out.tfevents.123.host"
    bad.write_bytes(b"\x00\x01 not a record")
    with pytest.raises(UserError, match="TensorBoard"):
        read_log(bad)
    path = write_trl_state(tmp_path / "trainer_state.json", n=4)
    doc = json.loads(path.read_text())
    del doc["log_history"][2]["step_time"]
    path.write_text(json.dumps(doc, indent=2))
    lines = path.read_text().splitlines()
    want = [i + 1 for i, line in enumerate(lines) if '"step": 3,' in line][0]
    with pytest.raises(UserError, match=rf"{path}:{want}: log_history step 3 has no 'step_time'"):
        read_log(path)
    run = make_ablation(tmp_path / "run")
    res = json.loads((run / "sync" / "results.json").read_text())
    del res["iterations"][2]["stage_s"]
    (tmp_path / "lone").mkdir()
    (tmp_path / "lone" / "results.json").write_text(json.dumps(res))  # no samples/events: read as a log
    assert "stage_s" in _error(tmp_path / "lone" / "results.json")


def test_unknown_content_and_missing_file(tmp_path):
    (tmp_path / "notes.txt").write_text("epoch 1 loss 0.3\n")
    assert "not a log plan reads" in _error(tmp_path / "notes.txt")
    assert "no such file" in _error(tmp_path / "absent.jsonl")
    (tmp_path / "cut.json").write_text('{"log_history": [')
    with pytest.raises(UserError, match="does not parse"):
        read_log(tmp_path / "cut.json")
