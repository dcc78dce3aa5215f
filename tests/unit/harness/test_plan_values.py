"""`rlbench plan` on bad values: every value of every step a log holds is read as a finite number in its range
(a step's seconds, the token count and lengths > 0; a stage's seconds >= 0), or the plan exits 2 naming the
file, the line (the step, for event files) and the key; lines a reader leaves out are counted in a note."""
from __future__ import annotations

import json

import pytest

from rlbench.core.errors import UserError
from rlbench.plan.detect import read_log
from support.cli import rlbench
from support.plan_logs import verl_steps, write_tensorboard, write_trl_state, write_verl_console, write_verl_jsonl

BAD = [("timing_s/gen", float("nan")), ("timing_s/step", 0.0), ("perf/total_num_tokens", 0),
       ("response_length/mean", float("nan")), ("timing_s/step", float("inf")), ("timing_s/gen", -3.0),
       ("timing_s/step", -80.0), ("timing_s/update_actor", -1.0), ("perf/throughput", 0.0),
       ("response_length/max", float("inf"))]


@pytest.mark.parametrize("key,value", BAD)
@pytest.mark.parametrize("step", [59, 2])  # one the plan's 32 sampled steps include, one of the warm-up it drops
def test_a_bad_value_on_any_step_is_an_error_naming_file_line_and_key(tmp_path, key, value, step):
    rows = verl_steps(200, gpus=8)
    rows[step][key] = value
    path = write_verl_jsonl(tmp_path / "m.jsonl", rows)
    with pytest.raises(UserError) as err:
        read_log(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{step + 1}: ") and repr(key) in msg and f"step {step}" in msg, msg
    assert "allowed: a finite number" in msg


def test_the_console_and_event_files_check_the_same_values(tmp_path):
    rows = verl_steps(12, gpus=8)
    rows[7]["timing_s/gen"] = float("nan")
    with pytest.raises(UserError, match=rf"{tmp_path / 'train.log'}:9: 'timing_s/gen' is nan at step 7"):
        read_log(write_verl_console(tmp_path / "train.log", rows))
    with pytest.raises(UserError, match=r"tb \(step 7\): 'timing_s/gen' is nan"):
        read_log(write_tensorboard(tmp_path / "tb", rows))


def test_a_step_no_longer_than_its_checkpoint_is_an_error(tmp_path):
    rows = verl_steps(8, gpus=8)
    rows[5]["timing_s/save_checkpoint"] = rows[5]["timing_s/step"]
    with pytest.raises(UserError, match=r"m.jsonl:6: step 5's 'timing_s/step' .* no longer than the checkpoint"):
        read_log(write_verl_jsonl(tmp_path / "m.jsonl", rows))


def test_evaluation_comes_out_of_the_step_only_where_the_step_holds_it(tmp_path):
    """VERL 0.9.1 times validation after `step` (its step shorter than stages + testing: nothing taken out);
    VERL before 0.5 timed it inside (the step holds its stages and the testing: the testing taken out)."""
    rows = verl_steps(8, gpus=8)
    step = rows[5]["timing_s/step"]
    rows[5]["timing_s/testing"] = step  # after the step: the step cannot hold it
    assert read_log(write_verl_jsonl(tmp_path / "after.jsonl", rows)).steps[4].wall_s == pytest.approx(step)
    rows[5]["timing_s/step"], rows[5]["timing_s/testing"] = step + 30.0, 30.0  # inside the step
    assert read_log(write_verl_jsonl(tmp_path / "inside.jsonl", rows)).steps[4].wall_s == pytest.approx(step)


def test_lines_without_step_time_or_tokens_are_counted_in_a_note(tmp_path):
    rows = verl_steps(10, gpus=8)
    rows.insert(6, {"val-core/openai/gsm8k/reward/mean@1": 0.4})  # a validation line between training steps
    path = write_verl_jsonl(tmp_path / "m.jsonl", rows)
    log = read_log(path)
    note = next(n for n in log.notes if "skipped" in n)
    assert note.startswith("2 skipped line(s) with neither 'timing_s/step' nor 'perf/total_num_tokens'")
    assert "line 1 (step 0)" in note and "line 7 (step 6)" in note
    done = rlbench("plan", path)
    assert done.returncode == 0, done.stderr
    assert "2 skipped line(s)" in done.stdout


def test_trl_errors_name_trls_own_keys(tmp_path):
    path = write_trl_state(tmp_path / "trainer_state.json", n=8)
    doc = json.loads(path.read_text())
    doc["log_history"][4]["step_time"] = float("nan")
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(UserError, match=r"trainer_state.json:\d+: 'step_time' is nan at step 5; allowed"):
        read_log(path)
    doc["log_history"][4]["step_time"] = 12.0
    doc["log_history"][4]["num_tokens"] = doc["log_history"][3]["num_tokens"]  # no tokens in the step
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(UserError, match=r"'num_tokens' is .* at step 5, not above the entry before's"):
        read_log(path)
    good = write_trl_state(tmp_path / "ok" / "trainer_state.json", n=8) if (tmp_path / "ok").mkdir() is None else None
    done = rlbench("plan", good)
    assert done.returncode == 2
    assert "TRL's trainer_state.json does not record how many GPUs" in done.stderr
    assert "perf/throughput" not in done.stderr
    assert "2 skipped log_history entr(ies)" in rlbench("plan", good, "--gpus", "2").stdout
