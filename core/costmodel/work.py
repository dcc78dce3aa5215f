"""The training work of samples, as the trainer executes it (the cost model's unit of training
seconds: core/costmodel/predict.py)."""
from __future__ import annotations

from collections import defaultdict


def train_tokens(rows: list[dict], shared_prompt: bool) -> int:
    """Tokens the trainer processes for these samples (one group's or many): prompt once per group
    when packed."""
    if not shared_prompt:
        return sum(int(s["prompt_len"]) + int(s["response_len"]) for s in rows)
    prompts = {s["prompt"]: int(s["prompt_len"]) for s in rows}
    return sum(prompts.values()) + sum(int(s["response_len"]) for s in rows)


def train_work(rows: list[dict], shared_prompt: bool, micro_batch: int | None,
               shape: dict | None = None) -> float:
    """Executed training work of these samples: each group's responses in micro-batches of
    `micro_batch` (in sample order, never straddling groups, as the trainer splits them), a
    micro-batch run as [rows, prompt + its longest response] (padding included) or, packed, as one
    sequence of the prompt and its responses. With the model's shape: forward FLOPs (2 N per
    position + 4 L H Dh S^2 per sequence); without: positions. micro_batch None: the real tokens
    (train_tokens; stated costs per trained token)."""
    if not micro_batch:
        return float(train_tokens(rows, shared_prompt))
    groups = defaultdict(list)
    for s in rows:
        groups[s["prompt"]].append(s)
    positions = square = 0
    for group in groups.values():
        group.sort(key=lambda s: s["sample"])
        for i in range(0, len(group), micro_batch):
            chunk, p = group[i:i + micro_batch], int(group[0]["prompt_len"])
            resp = [int(s["response_len"]) for s in chunk]
            # (rows, length)
            seqs = [(1, p + sum(resp))] if shared_prompt else [(len(chunk), p + max(resp))]
            positions += sum(n * L for n, L in seqs)
            square += sum(n * L * L for n, L in seqs)
    if not shape:
        return float(positions)
    return 2.0 * shape["matmul_params"] * positions + \
        4.0 * shape["layers"] * shape["heads"] * shape["head_dim"] * square
