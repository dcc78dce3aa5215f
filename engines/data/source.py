"""The configured problems: built-in task or a local GSM8K file, with train/eval splits and
prompts."""
from __future__ import annotations

from dataclasses import dataclass, field

from rlbench.core.errors import UserError
from rlbench.engines.data.facts import fact_shots, fact_splits
from rlbench.engines.data.gsm8k import load_gsm8k
from rlbench.engines.data.task import (Problem, TaskShape, builtin_splits, few_shot_examples,
                                       format_prompt)


@dataclass
class Dataset:
    train: list[Problem]
    eval: list[Problem]
    shots: list[Problem]
    # split fact: seen-fact eval problems (else none)
    seen: list[Problem] = field(default_factory=list)

    def prompt_text(self, problem: Problem) -> str:
        return format_prompt(problem.question, self.shots)


def load_dataset(dcfg, seed: int) -> Dataset:
    if dcfg.source == "builtin" and dcfg.split == "fact":
        train, evl, seen = fact_splits(dcfg.train_size, dcfg.eval_size, seed, TaskShape.of(dcfg),
                                       dcfg.heldout_share)
        shots = fact_shots(dcfg.few_shot, seed, dcfg.heldout_share, dcfg) if dcfg.few_shot else []
        return Dataset(train=train, eval=evl, shots=shots, seen=seen)
    if dcfg.source == "builtin":
        train, evl = builtin_splits(dcfg.train_size, dcfg.eval_size, seed, dcfg.min_steps,
                                    dcfg.max_steps, dcfg.max_number)
    else:
        rows = load_gsm8k(dcfg.path)
        if dcfg.eval_path:
            train, evl = rows, load_gsm8k(dcfg.eval_path)[: dcfg.eval_size]
        else:
            if len(rows) <= dcfg.eval_size:
                raise UserError(f"{dcfg.path}: {len(rows)} problems, need more than data.eval_size="
                                f"{dcfg.eval_size} to hold out an eval split (or set "
                                f"data.eval_path)")
            train, evl = rows[dcfg.eval_size:], rows[: dcfg.eval_size]
    shots = few_shot_examples(dcfg.few_shot, seed) if dcfg.few_shot else []
    return Dataset(train=train, eval=evl, shots=shots)
