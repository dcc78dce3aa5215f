"""Real GSM8K from a local file: OpenAI's JSONL or VERL's preprocessed parquet. Nothing is
downloaded.

JSONL (.jsonl, .json): one {"question": ..., "answer": "...#### 72"} object per line; the answer
number is the text after the last `####`, commas removed ("1,234" -> "1234", as GSM8K's own
grader and VERL's preprocessing do).
Parquet (.parquet): VERL's `examples/data_preprocess/gsm8k.py` output, one row per problem with
`prompt` (chat messages), `reward_model.ground_truth` and `extra_info.{question, answer}`.
"""
from __future__ import annotations

import json
from pathlib import Path

from rlbench.core.errors import UserError
from rlbench.engines.data.task import Problem

JSONL_SUFFIXES = (".jsonl", ".json")
_EXPECTED = "expected a JSON object with 'question' and 'answer' ending in '#### <number>'"


def load_gsm8k(path: str | Path) -> list[Problem]:
    """All problems in the file, in file order."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"{path}: GSM8K file not found (data.path / data.eval_path)")
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        problems = _load_jsonl(path)
    elif suffix == ".parquet":
        problems = _load_parquet(path)
    else:
        raise UserError(f"{path}: unknown GSM8K file type {suffix or '(none)'!r}; allowed: "
                        ".jsonl or .json (JSON lines, OpenAI format), .parquet (VERL preprocessed)")
    if not problems:
        raise UserError(f"{path}: no problems in the file")
    return problems


def answer_number(answer: str) -> str | None:
    """'... #### 1,234' -> '1234'; None when there is no `####` or nothing after it."""
    if "####" not in answer:
        return None
    number = answer.rsplit("####", 1)[1].replace(",", "").strip()
    return number or None


def _load_jsonl(path: Path) -> list[Problem]:
    problems = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue  # blank lines (a trailing newline) are not problems
            problems.append(_jsonl_problem(line, f"{path}:{lineno}"))
    return problems


def _jsonl_problem(line: str, where: str) -> Problem:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e.msg}); {_EXPECTED}") from None
    if not isinstance(row, dict):
        raise UserError(f"{where}: a JSON {type(row).__name__}, not an object; {_EXPECTED}")
    for key in ("question", "answer"):
        if not isinstance(row.get(key), str):
            raise UserError(f"{where}: missing or non-string {key!r}; {_EXPECTED}")
    number = answer_number(row["answer"])
    if number is None:
        raise UserError(f"{where}: 'answer' has no number after '####'; {_EXPECTED}")
    return Problem(row["question"], row["answer"], number)


def _load_parquet(path: Path) -> list[Problem]:
    # inside: pandas costs every cell process ~0.5 s; only a parquet file needs it
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a damaged or non-parquet file
        raise UserError(f"{path}: cannot read as parquet ({e})") from None
    if "reward_model" not in frame.columns:
        raise UserError(f"{path}: no 'reward_model' column (has {list(frame.columns)}); expected "
                        "VERL's GSM8K parquet with prompt, reward_model.ground_truth, extra_info")
    return [_parquet_problem(row, f"{path}: row {i}")
            for i, row in enumerate(frame.to_dict("records"))]


def _parquet_problem(row: dict, where: str) -> Problem:
    reward_model = row.get("reward_model")
    gt = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if gt is None or not str(gt).strip():
        raise UserError(f"{where}: no reward_model.ground_truth")
    gt = str(gt).strip()
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    question = extra.get("question") or _user_message(row.get("prompt"))
    if not question:
        raise UserError(f"{where}: no extra_info.question and no user message in 'prompt'")
    return Problem(str(question), str(extra.get("answer") or f"#### {gt}"), gt)


def _user_message(prompt) -> str | None:
    """Content of the last user message; `prompt` is a list (numpy array from parquet) of dicts."""
    if prompt is None or isinstance(prompt, (str, bytes)):
        return None
    users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users else None
