"""Partial rollout's mailbox: how a rollout worker learns, between two decode steps, that newer
weights are waiting in shared memory, and how neither side sees them half-written.

The trainer side (the bounded-staleness schedule, in the driver) writes the shared weights and posts
their version while holding `lock`; a rollout worker reads the posted version at every token
boundary (one shared integer, no lock) and, when it is newer than its own, copies the weights while
holding `lock`. Created before the worker processes start and handed to them as an argument (spawn
pickles the lock and the shared integer only then).
"""
from __future__ import annotations

import torch.multiprocessing as mp


class WeightMailbox:
    def __init__(self, resume_kv: str = "recompute"):
        """resume_kv: what the workers' samplers do with the K/V of sequences in flight
        (engine.resume_kv)."""
        self.resume_kv = resume_kv
        ctx = mp.get_context("spawn")
        # held while the shared weights are written (trainer) or copied (worker)
        self.lock = ctx.Lock()
        self._version = ctx.RawValue("q", -1)  # the version in shared memory; -1: none posted yet

    @property
    def version(self) -> int:
        return self._version.value

    def post(self, version: int) -> None:
        """The shared weights now hold `version` (call with `lock` held, right after writing
        them)."""
        self._version.value = version
