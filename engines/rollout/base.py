"""The rollout interface every backend implements (built-in sampler, vLLM)."""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Callable, Protocol

from rlbench.core.record.stages import NODE_CLOCK, now


@dataclass
class SamplingParams:
    """How one batch is sampled. n and max_new_tokens come from the config (rollout.group_size,
    rollout.max_new_tokens), never from a default here; temperature 1 and top_p 1 are the
    identity."""

    n: int  # G: samples per prompt
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    iteration: int = 0
    greedy: bool = False  # eval: argmax, n must be 1


@dataclass
class PromptRequest:
    index: int  # prompt index within the iteration (seeds sampling together with sample index)
    prompt_ids: list[int]


@dataclass
class Group:
    """One prompt and its G sampled responses, as emitted by a rollout worker."""

    prompt_index: int
    prompt_ids: list[int]
    responses: list[list[int]]  # G token-id lists, EOS included when generated
    # G lists, log pi_behav(token) at the sampling temperature
    behaviour_logprobs: list[list[float]]
    # weight version that generated the group's first tokens (the oldest, with partial rollout)
    version: int = 0
    # per response: ended with EOS (False: hit max_new_tokens)
    finished: list[bool] = field(default_factory=list)
    # Partial rollout only: per response, the weight version that generated each token (G lists, one
    # entry per token). None: every token came from `version`.
    token_versions: list[list[int]] | None = None

    def sample_version(self, j: int) -> int:
        """Sample j's behaviour version: the oldest version among its own tokens (a sample admitted
        after a mid-generation reload is all newer than the group's oldest token)."""
        if self.token_versions is None or not self.token_versions[j]:
            return self.version
        return min(self.token_versions[j])


@dataclass
class SealedGroup:
    """A finished Group on the queue path between a rollout worker and the trainer's consumer.

    The rollout worker seals it (pickles it once, inside its rollout stage); the consumer opens it
    (Stage.HANDOFF, timed with its CPU time): the queue path's own work, which `rlbench check`
    compares. The prompt index travels in the clear so a consumer can order groups without opening
    them.
    """

    prompt_index: int
    payload: bytes
    sealed_at: float = 0.0  # the run's clock when it was sealed (core/record/stages.py `now`)
    elsewhere: bool = False  # sealed on another node than the driver's: it crosses the link
    # the driver's clock when it arrived there (engines/rollout/pool.py)
    arrived_at: float | None = None

    @classmethod
    def seal(cls, group: Group) -> "SealedGroup":
        return cls(group.prompt_index, pickle.dumps(group, protocol=pickle.HIGHEST_PROTOCOL), now(),
                   NODE_CLOCK.elsewhere)

    def open(self) -> Group:
        return pickle.loads(self.payload)


@dataclass
class IterationEnd:
    """The rollout pool's last message of an iteration: its workers' stage events and sampler
    stats."""

    events: list
    stats: list[dict]


@dataclass
class PendingGroup:
    """One request's G samples while they are generated; becomes a Group when the last one
    finishes."""

    req: PromptRequest
    g: int
    done: int = 0  # samples finished so far
    # per sample j: token ids, behaviour log-probs, ended with EOS
    responses: list = field(init=False)
    logprobs: list = field(init=False)
    finished: list = field(init=False)
    # per sample j: its tokens' weight versions (partial rollout) or None
    versions: list = field(init=False)

    def __post_init__(self):
        self.responses, self.logprobs, self.finished = ([None] * self.g, [None] * self.g,
                                                        [False] * self.g)
        self.versions = [None] * self.g

    def finish(self, j: int, tokens: list[int], logprobs: list[float], eos: bool, version: int,
               out: list[Group], on_group: Callable[[Group], None] | None,
               versions: list[int] | None = None) -> None:
        """Store sample j; when all G are done, append the group to out and hand it to on_group at
        once.

        versions: per token, the weight version that generated it, when weights changed mid-sequence
        (partial rollout); the group's `version` is then the oldest of them."""
        self.responses[j], self.logprobs[j], self.finished[j] = tokens, logprobs, eos
        self.versions[j] = versions
        self.done += 1
        if self.done == self.g:
            per_token = [v if v is not None else [version] * len(t)
                         for v, t in zip(self.versions, self.responses)]
            seen = {x for v in per_token for x in v}
            mixed = len(seen) > 1  # across tokens of a sample or across the group's samples
            group = Group(self.req.index, list(self.req.prompt_ids), self.responses, self.logprobs,
                          version=min(seen, default=version), finished=self.finished,
                          token_versions=per_token if mixed else None)
            out.append(group)
            if on_group is not None:
                on_group(group)


class RolloutBackend(Protocol):
    def generate(self, requests: list[PromptRequest], sampling: SamplingParams,
                 on_group: Callable[[Group], None] | None = None) -> list[Group]:
        """Generate G samples for every request; call on_group the moment a group's G samples
        finish.

        Returns all groups in completion order. Sample j of request i is seeded by
        (sampling.seed, sampling.iteration, request.index, j), so it does not depend on batching.
        """

    def load_weights(self, state: dict, version: int) -> None:
        """Copy the given parameters (name -> tensor) into the backend; later samples carry
        `version`."""
