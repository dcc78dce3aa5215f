"""What the schedules share: the per-iteration input/output, the interfaces a schedule drives
(`SupportsTraining`, `RolloutSource`) and offers (`Schedule`), and the trainer's group pipeline.

Matching code in the two schedules keeps the same names and order
(docs/architecture/conventions.md).
"""
from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rlbench.engines.rollout.base import Group, IterationEnd, PromptRequest, SamplingParams
from rlbench.core.errors import WorkerError
from rlbench.core.record.stages import Stage


@dataclass
class IterationInput:
    iteration: int
    requests: list[PromptRequest]
    answers: dict[int, str]  # prompt index -> ground truth
    sampling: SamplingParams


@dataclass
class IterationOutput:
    groups: list[Group]  # in the order they were trained
    rewards: dict[int, list[float]]  # prompt index -> [G]
    trained_version: int  # version of the weights the gradients were taken at
    train_stats: dict
    # per rollout worker, sampler.last_stats
    rollout_stats: list[dict] = field(default_factory=list)


@runtime_checkable
class SupportsTraining(Protocol):
    """What a schedule trains with: the in-process Trainer or the data-parallel ranks
    (DataParallelTrainer)."""

    def begin(self) -> None:
        """Start an iteration's gradient accumulation."""

    def train(self, rec, k: int, groups: list[Group],
              answers: dict[int, str]) -> dict[int, list[float]] | None:
        """Accumulate the gradients of these groups: Trainer.train, here or (handed on, None
        returned) on the data-parallel ranks."""

    def wait_trained(self, k: int) -> None:
        """Return once the groups handed to train() are trained (their gradients accumulated); the
        weights are unchanged until finish()."""

    def finish(self, rec, k: int) -> tuple[dict, dict[int, list[float]]]:
        """All-reduce, clip and step; -> (step stats, rewards of every trained group)."""

    def publish(self, iteration: int | None) -> dict:
        """The current weights, where the rollout side reads them."""

    def close(self) -> None: ...


@runtime_checkable
class RolloutSource(Protocol):
    """The producer side of the async schedules (engines/rollout/pool.py RolloutPool)."""

    def publish(self, weights: dict, version: int, iteration: int) -> None:
        """Every rollout worker loads these weights before its next batch."""

    def produce(self, iteration: int, requests, sampling, groups: queue.Queue,
                timeout_s: float) -> None:
        """Put each finished group on `groups` as it finishes (sealed: SealedGroup), then an
        IterationEnd (or the error)."""

    def close(self) -> None: ...


@runtime_checkable
class Schedule(Protocol):
    """What the runner drives: one call per iteration; `trainer` owns the training weights."""

    trainer: SupportsTraining

    def run_iteration(self, inp: IterationInput) -> IterationOutput: ...

    def close(self) -> None: ...


class GroupReceiver:
    """The consumer side of the async schedules: takes finished groups off the producer's queue.

    Groups come sealed (SealedGroup), in arrival order, or re-ordered to dispatch order (prompt
    index 0, 1, ...) for the bitwise equivalence test; waiting is recorded as queue_wait, opening a
    group as handoff (the queue path's work, with its CPU time); a producer error is raised here.
    """

    def __init__(self, rec, in_dispatch_order: bool, timeout_s: float):
        self.rec, self.in_dispatch_order, self.timeout_s = rec, in_dispatch_order, timeout_s

    def groups(self, k: int, arrived: queue.Queue, n: int):
        pending, next_index = {}, 0
        for _ in range(n):
            with self.rec.stage(Stage.QUEUE_WAIT, k):
                while True:
                    if self.in_dispatch_order and next_index in pending:
                        sealed = pending.pop(next_index)
                        break
                    item = self._get(arrived)
                    if not self.in_dispatch_order:
                        sealed = item
                        break
                    pending[item.prompt_index] = item
            # its path across the link, a stage of its own
            if sealed.elsewhere and sealed.arrived_at is not None:
                self.rec.add(Stage.GROUP_TRANSFER, k, sealed.sealed_at, sealed.arrived_at)
            with self.rec.stage(Stage.HANDOFF, k):
                group = sealed.open()
            next_index += 1
            yield group

    def arrived_batches(self, k: int, arrived: queue.Queue, n: int, budget: int | None):
        """groups() in lists: with a token budget (train.micro_batch_tokens) each list holds the
        groups that had arrived by the time the previous one was taken, until their tokens reach the
        budget, so the trainer packs them into full micro-batches without waiting for one more
        group; without, one group each. Arrival order only (in dispatch order, the next group may
        not be the one that arrived)."""
        batch, tokens = [], 0
        for group in self.groups(k, arrived, n):
            if budget is None or self.in_dispatch_order:
                yield [group]
                continue
            batch.append(group)
            tokens += sum(len(group.prompt_ids) + len(r) for r in group.responses)
            if tokens >= budget or arrived.empty():
                yield batch
                batch, tokens = [], 0
        if batch:
            yield batch

    def _next(self, arrived: queue.Queue, waiting_for: str):
        """The producer's next item; its error is raised here, silence past timeout_s is a
        WorkerError."""
        try:
            item = arrived.get(timeout=self.timeout_s)
        except queue.Empty:
            raise WorkerError(f"no answer from the rollout workers for {self.timeout_s:.0f}s while "
                              f"waiting for {waiting_for}") from None
        if isinstance(item, BaseException):
            raise item
        return item

    def _get(self, arrived: queue.Queue):
        item = self._next(arrived, "a rollout group")
        if isinstance(item, IterationEnd):
            raise WorkerError("rollout workers finished before every group arrived")
        return item

    def take_end(self, arrived: queue.Queue) -> IterationEnd:
        """The producer's end marker of the iteration: the workers' stage events and sampler
        stats."""
        item = self._next(arrived, "the end of the batch")
        if not isinstance(item, IterationEnd):
            raise WorkerError(f"expected the end of the batch, got {type(item).__name__}")
        return item
