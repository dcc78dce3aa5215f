"""The log-prob of each chosen token, computed in chunks of positions so that the [tokens x
vocabulary] logits in fp32 never exist at once.

Every log-prob pass (old, reference, update; every sequence layout) ends the same way: the hidden
states of the N positions that predict a token go through the LM head, an fp32 log-softmax over the
vocabulary, and a gather of the chosen token. Done at once that holds the [N, V] logits in the
model's dtype plus three fp32 copies of them (the cast, the division by the temperature, the
log-softmax, which autograd also keeps for the backward): at the Qwen2.5-0.5B shape (V = 151,936) a
group of 8 responses of 384 tokens is ~1.9 GB per fp32 copy. Chunked, the positions go through in
slices of at most `LOGITS_BUDGET_BYTES` of fp32 logits, each slice under activation checkpointing
when a gradient is wanted: its forward keeps only its input hidden states and its N-slice of
log-probs, and its backward computes the slice's logits again (one extra LM-head matmul per slice:
the price of the memory). Values and gradients are those of the one-shot computation up to fp32
summation order; a pass whose logits fit the budget runs the one-shot code unchanged (bit for bit
today's numbers).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

# fp32 logits per slice. 256 MiB: at V = 151,936 a slice of 441 positions, a few slices per
# micro-batch, each matmul still large enough to keep an accelerator's matrix units busy.
LOGITS_BUDGET_BYTES = 256 * 2**20


def slice_rows(vocab: int, budget: int | None = None) -> int:
    """Positions per slice: as many as fit `budget` bytes of fp32 logits (at least one; None: the
    module's LOGITS_BUDGET_BYTES, read at the call)."""
    return max(1, (LOGITS_BUDGET_BYTES if budget is None else budget) // (4 * vocab))


def fits(rows: int, vocab: int, budget: int | None = None) -> bool:
    """Whether the fp32 logits of `rows` positions fit one slice (then the one-shot code runs)."""
    return rows <= slice_rows(vocab, budget)


def picked_logprobs(logits: torch.Tensor, targets: torch.Tensor,
                    temperature: float) -> torch.Tensor:
    """logits [..., V], targets [...] -> [...] fp32 log-probs of the targets (the one-shot
    computation)."""
    # fp32 log-softmax: in bf16 the log-prob of a likely token loses most of its digits.
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [..., V]
    return logp.gather(-1, targets[..., None]).squeeze(-1)          # [...]


def chosen_logprobs(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor,
                    targets: torch.Tensor,
                    temperature: float, vocab: int, budget: int | None = None) -> torch.Tensor:
    """hidden [..., D] (the predicting positions), targets [...] -> [...] fp32 log p(target), with
    grad when grad is enabled. head: hidden [..., D] -> logits [..., V] (the LM head, with the final
    norm where the caller has not applied it: the norm is per position, so it slices too)."""
    rows = slice_rows(vocab, budget)
    # [N, D]: the head's product one matrix multiply whatever the layout (a 3-D input that is not
    # contiguous would run as a batched product over copies of a head whose weight requires no grad:
    # packing.py)
    flat_h, flat_t = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)  # [N, D], [N]
    if targets.numel() <= rows:
        return picked_logprobs(head(flat_h), flat_t, temperature).view(targets.shape)
    grad = torch.is_grad_enabled() and hidden.requires_grad
    out = []
    # split: views, one concatenation in backward
    for h, t in zip(flat_h.split(rows), flat_t.split(rows)):
        if grad:  # keep only h; the slice's logits are computed again in the backward
            out.append(checkpoint(_slice, head, h, t, temperature, use_reentrant=False))
        else:
            out.append(_slice(head, h, t, temperature))
    return torch.cat(out).view(targets.shape)  # [...]


def _slice(head, h: torch.Tensor, t: torch.Tensor, temperature: float) -> torch.Tensor:
    """One slice: h [n, D], t [n] -> [n]."""
    return picked_logprobs(head(h), t, temperature)
