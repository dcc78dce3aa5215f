"""The workload as TRL reads it: the iterations' prompts as dataset rows, and rlbench's strict GSM8K
reward as a TRL reward function.

Row order is the schedule: iteration k's train.prompts_per_iteration problems (rlbench's own seeded
draw, engines/factory.py iteration_problems) follow iteration k-1's, and TRL reads them unshuffled
(shuffle_dataset=False), so both engines train the same prompts in the same iteration. A prompt is
the text rlbench prompts with; where the tokenizer has a chat template (rlbench applies it), it is
one user message and TRL applies the same template.
"""
from __future__ import annotations

import hashlib
import json

from rlbench.engines.data.reward import gsm8k_reward
from rlbench.engines.factory import iteration_problems


def train_rows(cfg, dataset, chat: bool) -> list[dict]:
    """One row per (iteration, prompt): prompt (text, or [user message] when chat), answer,
    iteration, index."""
    rows = []
    for k in range(cfg.run.iterations):
        for i, problem in enumerate(iteration_problems(cfg, dataset, k)):
            text = dataset.prompt_text(problem)
            rows.append({"prompt": [{"role": "user", "content": text}] if chat else text,
                         "answer": problem.answer, "iteration": k, "index": i})
    return rows


def train_dataset(rows: list[dict]):
    """The rows as the `datasets.Dataset` TRL trains on, its fingerprint the hash of the rows. Left
    to itself, datasets fingerprints a new table by pickling it with dill, which failed with pyarrow
    24 here (datasets 5.2 asks for >= 24; "Can't pickle <class 'MonthDayNano'>"): an image whose
    pyarrow predates the one datasets was tested with then fails in every rank before its first
    step."""
    from datasets import Dataset  # inside: optional dependency (datasets)
    from datasets.table import InMemoryTable  # inside: optional dependency (datasets)

    fingerprint = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]
    return Dataset(InMemoryTable.from_pylist(rows), fingerprint=fingerprint)


def completion_text(completion) -> str:
    """A TRL completion as text: a string, or (conversational prompts) [{"role": "assistant",
    "content": ...}]."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def strict_gsm8k(completions, answer, **_) -> list[float]:
    """TRL reward function: rlbench's strict GSM8K rule (engines/data/reward.py), 1.0 or 0.0 per
    completion. TRL passes the dataset's columns (answer, iteration, index) as keyword arguments."""
    return [gsm8k_reward(completion_text(c), a) for c, a in zip(completions, answer)]


def longest_prompt(tok, rows: list[dict]) -> int:
    """The longest prompt of the rows in tokens, as TRL will encode it (the chat template applied to
    a conversational prompt, with the assistant's turn opened)."""
    def length(prompt) -> int:
        if isinstance(prompt, str):
            return len(tok(prompt)["input_ids"])
        ids = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    return max((length(r["prompt"]) for r in rows), default=0)
