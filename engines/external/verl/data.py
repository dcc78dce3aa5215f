"""The workload as VERL reads it: GSM8K parquet rows in the layout of VERL's
examples/data_preprocess/gsm8k.py.

That layout's data source ("openai/gsm8k") routes VERL's default reward to
verl/utils/reward_score/gsm8k.py (the strict `#### <number>` rule, rlbench's rule:
tests/unit/engines/test_external_verl.py holds the two equal). On rlbench's own workload the rows
are the iterations' prompts in order (iteration k's train.prompts_per_iteration problems, rlbench's
seeded draw: engines/factory.py iteration_problems), the prompt text rlbench prompts with, read by
VERL unshuffled (data.shuffle=false) in batches of train.prompts_per_iteration: both engines train
the same prompts in the same iteration.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from rlbench.engines.factory import iteration_problems

DATA_SOURCE = "openai/gsm8k"
# VERL's gsm8k.py
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def verl_prompt(problem) -> str:
    """VERL's GSM8K user message: the question, a space, the step-by-step instruction."""
    return f"{problem.question} {INSTRUCTION}"


def verl_rows(problems: Sequence, prompt_fn: Callable | None = None,
              split: str = "train") -> list[dict]:
    """Rows exactly as VERL's examples/data_preprocess/gsm8k.py builds them (problem.solution is
    GSM8K's raw answer text ending in '#### <n>', problem.answer the number after it)."""
    prompt_fn = prompt_fn or verl_prompt
    return [{"data_source": DATA_SOURCE,
             "prompt": [{"role": "user", "content": prompt_fn(p)}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": p.answer},
             "extra_info": {"split": split, "index": i, "answer": p.solution,
                            "question": p.question}}
            for i, p in enumerate(problems)]


def write_verl_parquet(problems: Sequence, path: str | Path, prompt_fn: Callable | None = None,
                       split: str = "train") -> Path:
    """Writes `problems` as a VERL GSM8K parquet (columns data_source, prompt, ability,
    reward_model, extra_info); `prompt_fn(problem) -> str` makes the user message (default: VERL's
    own)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(verl_rows(problems, prompt_fn, split)).to_parquet(path, index=False)
    return path


def prompt_token_bound(problems: Sequence, prompt_fn: Callable | None = None,
                       template_slack: int = 128) -> int:
    """An upper bound on prompt tokens for data.max_prompt_length: UTF-8 bytes of the longest user
    message (a byte-level BPE token is at least one byte) plus room for the chat template."""
    prompt_fn = prompt_fn or verl_prompt
    longest = max((len(prompt_fn(p).encode()) for p in problems), default=0)
    return -(-(longest + template_slack) // 64) * 64  # round up to a multiple of 64


def workload_problems(cfg, dataset, iterations: int | None = None) -> list:
    """Iterations 0..n-1's problems in order (n: cfg.run.iterations, or `iterations` for a recipe
    that reads ahead of its steps)."""
    n = cfg.run.iterations if iterations is None else iterations
    return [p for k in range(n) for p in iteration_problems(cfg, dataset, k)]


def workload_files(problems: Sequence, dataset, folder: Path) -> tuple[Path, Path]:
    """rlbench's workload as VERL's train and validation parquet: the train rows `problems` in order
    (workload_problems), the validation rows the eval split; both with rlbench's prompt text. ->
    (train, val)."""
    return (write_verl_parquet(problems, folder / "train.parquet", dataset.prompt_text, "train"),
            write_verl_parquet(dataset.eval, folder / "test.parquet", dataset.prompt_text, "test"))
