"""Local GSM8K files: OpenAI JSONL and VERL parquet load to Problems; bad input is a clear UserError."""
import json

import pandas as pd
import pytest

from rlbench.engines.data.gsm8k import load_gsm8k
from rlbench.engines.data.reward import gsm8k_reward
from rlbench.core.errors import UserError

ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
    {"question": "A car costs $1,200 and a bike $34. Total?", "answer": "1200+34=1234\n#### 1,234"},
    {"question": "It is 5 degrees and drops 9. Now?", "answer": "#### x\n5-9=-4\n####  -4 "},
]


def _write_jsonl(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_openai_jsonl(tmp_path):
    f = _write_jsonl(tmp_path / "train.jsonl", [json.dumps(r) for r in ROWS] + [""])
    problems = load_gsm8k(f)
    assert [p.answer for p in problems] == ["7", "1234", "-4"]  # after the LAST ####, commas removed
    assert problems[0].question == ROWS[0]["question"] and problems[0].solution == ROWS[0]["answer"]
    assert load_gsm8k(str(f)) == problems


def _verl_row(i, question, answer_text, gt):
    instruction = 'Let\'s think step by step and output the final answer after "####".'
    return {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"{question} {instruction}"}],
            "ability": "math", "reward_model": {"style": "rule", "ground_truth": gt},
            "extra_info": {"split": "train", "index": i, "answer": answer_text, "question": question}}


def test_verl_parquet(tmp_path):
    f = tmp_path / "train.parquet"
    pd.DataFrame([_verl_row(0, "Q zero?", "1+1=2\n#### 2", "2"),
                  _verl_row(1, "Q one?", "#### 72", "72")]).to_parquet(f)
    problems = load_gsm8k(f)
    assert [(p.question, p.solution, p.answer) for p in problems] == [
        ("Q zero?", "1+1=2\n#### 2", "2"), ("Q one?", "#### 72", "72")]
    assert gsm8k_reward(problems[1].solution, problems[1].answer) == 1.0


def test_verl_parquet_without_extra_info_uses_the_user_message(tmp_path):
    f = tmp_path / "test.parquet"
    row = _verl_row(0, "Q?", "", "5")
    row.pop("extra_info")
    pd.DataFrame([row]).to_parquet(f)
    (p,) = load_gsm8k(f)
    assert p.question.startswith("Q? Let's think") and p.solution == "#### 5" and p.answer == "5"


def test_bad_parquet_row_names_path_and_row(tmp_path):
    f = tmp_path / "bad.parquet"
    good, bad = _verl_row(0, "Q?", "#### 1", "1"), _verl_row(1, "Q?", "#### 1", "1")
    bad["reward_model"] = {"style": "rule", "ground_truth": ""}
    pd.DataFrame([good, bad]).to_parquet(f)
    with pytest.raises(UserError, match=r"bad\.parquet: row 1: .*ground_truth"):
        load_gsm8k(f)


@pytest.mark.parametrize("line, what", [
    ('{"question": "q", "answer": ', "not valid JSON"),
    ('{"question": "q"}', "'answer'"),
    ('{"question": "q", "answer": "42"}', "no number after '####'"),
    ('["q", "#### 1"]', "not an object"),
])
def test_malformed_line_is_a_user_error_with_path_and_line(tmp_path, line, what):
    f = _write_jsonl(tmp_path / "data.jsonl", [json.dumps(ROWS[0]), "", line])
    with pytest.raises(UserError) as e:
        load_gsm8k(f)
    msg = str(e.value)
    assert f"{f}:3:" in msg and what in msg and "#### <number>" in msg


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="nope.jsonl: GSM8K file not found"):
        load_gsm8k(tmp_path / "nope.jsonl")


def test_unknown_extension_lists_the_allowed_ones(tmp_path):
    f = tmp_path / "data.csv"
    f.write_text("question,answer\n")
    with pytest.raises(UserError) as e:
        load_gsm8k(f)
    assert all(s in str(e.value) for s in (".jsonl", ".json", ".parquet", "'.csv'"))


def test_not_a_parquet_file(tmp_path):
    f = tmp_path / "fake.parquet"
    f.write_text("not parquet")
    with pytest.raises(UserError, match="fake.parquet: cannot read as parquet"):
        load_gsm8k(f)
