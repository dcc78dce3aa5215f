"""What the trainer's passes run on: a micro-batch of one group's responses
(train.micro_batch_size), or responses of several groups packed up to a token budget
(train.micro_batch_tokens, `pack_by_tokens`).

Both offer the same fields to the loss (engines/trainer/grpo.py: per response its advantage,
behaviour log-probs and versions; `old` / `ref` filled by their phases) and one call for the
log-probs of their responses (`logprobs`), so the trainer's phases and the loss do not ask which one
they hold.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlbench.core.errors import UserError
from rlbench.engines.trainer.packing_varlen import Document, varlen_logprobs


@dataclass
class MicroBatch:
    """k responses of one group (micro-batches never straddle groups)."""

    prompt_index: int
    prompt_ids: list[int]
    responses: list[list[int]]
    advantages: torch.Tensor  # [k]
    old: list[torch.Tensor] | None = None  # per response [R_i], filled by the old_logprob phase
    ref: list[torch.Tensor] | None = None
    # per response [R_i]: log pi_behav from the rollout
    behaviour_logprobs: list[list[float]] | None = None
    behaviour_version: int = 0  # weight version that generated the group (the oldest of its tokens)
    # per response [R_i], when versions mix (partial rollout)
    behaviour_token_versions: list[list[int]] | None = None

    def logprobs(self, fn, model, temperature: float) -> list[torch.Tensor]:
        """fn (the configured layout, logprob_plans.py) over this group's responses -> [R_i] per
        response."""
        return fn(model, self.prompt_ids, self.responses, temperature)

    def parts(self) -> list[MicroBatch]:
        """The pieces of one group each this micro-batch holds: itself."""
        return [self]

    def slice(self, a: int, b: int) -> MicroBatch:
        """Responses a..b-1 of this micro-batch, with their own fields."""
        tv = self.behaviour_token_versions
        return MicroBatch(self.prompt_index, self.prompt_ids, self.responses[a:b],
                          self.advantages[a:b],
                          behaviour_logprobs=self.behaviour_logprobs[a:b]
                          if self.behaviour_logprobs else None,
                          behaviour_version=self.behaviour_version,
                          behaviour_token_versions=tv[a:b] if tv is not None else None)


class TokenBatch:
    """Pieces of one or more groups, trained as one forward/backward over one stream without padding
    (engines/trainer/packing_varlen.py). `shared[i]`: piece i is one shared-prompt document (its
    prompt once, then its responses); else every response of it is its own document `prompt +
    response`."""

    def __init__(self, pieces: list[MicroBatch], shared: list[bool]):
        self.pieces, self.shared = pieces, shared
        self.old: list[torch.Tensor] | None = None
        self.ref: list[torch.Tensor] | None = None
        self.responses = [r for p in pieces for r in p.responses]
        self.advantages = torch.cat([p.advantages for p in pieces])  # [B]
        have = all(p.behaviour_logprobs is not None for p in pieces)
        self.behaviour_logprobs = [b for p in pieces for b
                                   in p.behaviour_logprobs] if have else None
        # per response [B] (groups of several versions may share the batch); per token where a piece
        # mixes
        self.behaviour_version = [p.behaviour_version for p in pieces for _ in p.responses]
        self.behaviour_token_versions = None
        if any(p.behaviour_token_versions is not None for p in pieces):
            self.behaviour_token_versions = [
                v for p in pieces for v in (p.behaviour_token_versions or
                                            [[p.behaviour_version] * len(r) for r in p.responses])]

    def documents(self) -> list[Document]:
        out = []
        for p, shared in zip(self.pieces, self.shared):
            out += [Document(p.prompt_ids, p.responses)] if shared else \
                [Document(p.prompt_ids, [r]) for r in p.responses]
        return out

    def tokens(self) -> int:
        """Tokens of the stream (what the budget bounds)."""
        return sum(d.tokens for d in self.documents())

    def logprobs(self, fn, model, temperature: float) -> list[torch.Tensor]:
        """The whole stream in one pass (fn, the per-group layout, is not used) -> [R_i] per
        response."""
        return varlen_logprobs(model, self.documents(), temperature)

    def parts(self) -> list[MicroBatch]:
        return self.pieces


def pack_by_tokens(groups: list[MicroBatch], budget: int, shared_of) -> list[TokenBatch]:
    """Whole groups (one MicroBatch each, in order) -> TokenBatches of at most `budget` stream
    tokens, filled in order (a group continues into the next batch where it does not fit).
    shared_of(mb) -> whether that group is one shared-prompt document (its prompt counted once per
    batch it reaches) or one document per response (the prompt counted with each). UserError where
    one sequence (prompt + response) exceeds the budget."""
    batches: list[TokenBatch] = []
    pieces, shared, used = [], [], 0
    for mb in groups:
        share, P, start = shared_of(mb), len(mb.prompt_ids), 0
        for i, r in enumerate(mb.responses):
            if P + len(r) > budget:
                raise UserError(f"train.micro_batch_tokens={budget} is smaller than a sequence of "
                                f"{P + len(r)} tokens (prompt {P} + response {len(r)}): allowed: "
                                "at least the longest prompt + rollout.max_new_tokens")
            # a shared piece holds its prompt once
            cost = len(r) if share and i > start else P + len(r)
            if used + cost > budget:
                if i > start:
                    pieces.append(mb.slice(start, i))
                    shared.append(share)
                batches.append(TokenBatch(pieces, shared))
                pieces, shared, used, start, cost = [], [], 0, i, P + len(r)
            used += cost
        pieces.append(mb.slice(start, len(mb.responses)))
        shared.append(share)
    if pieces:
        batches.append(TokenBatch(pieces, shared))
    return batches
