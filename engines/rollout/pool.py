"""The rollout pool of the async schedules: one RolloutWorker per rollout device (engines/hosts.py).

Weights: locally, the trainer's rank 0 writes its parameters into tensors shared with every worker
and a small "sync" call follows; nothing large is pickled per iteration. On Ray they go once per
version through the object store. Prompts are dealt round-robin (prompt i to worker i mod R); each
worker keeps max_num_seqs sequences in flight and emits a group the moment its G samples are done.
"""
from __future__ import annotations

import queue

import torch

from rlbench.core.record.stages import now
from rlbench.engines.ray_util import RemoteWeights, to_numpy
from rlbench.engines.rollout.base import IterationEnd, SealedGroup


class RolloutPool:
    def __init__(self, host, shared: dict | None, mailbox=None, gate=None):
        """host: the rollout workers' host; shared: the shared-memory weights (local host), or None
        (Ray); mailbox: partial rollout's WeightMailbox (engines/rollout/mailbox.py), or None; gate:
        the RolloutGate that holds the workers between iterations (engines/rollout/gate.py), or
        None."""
        self.host, self.shared, self.mailbox, self.gate = host, shared, mailbox, gate
        self.names = host.workers
        self._syncs: list = []  # weight loads submitted, checked when the next batch is waited for

    def publish(self, weights: dict, version: int, iteration: int) -> None:
        """Tell every worker to load `weights` (already in shared memory when they are the shared
        tensors)."""
        if self.shared is not None:
            if weights is not self.shared:
                with torch.no_grad():
                    for n, t in weights.items():
                        self.shared[n].copy_(t)
            ref = None
        elif isinstance(weights, RemoteWeights):  # in the publishing rank's object store already
            ref = weights.refs
        else:
            import ray  # inside: optional dependency (ray)

            # in a list: each actor fetches it inside its timed stage
            ref = [ray.put(to_numpy(weights))]
        # A worker answers requests in order, so the load precedes its next batch.
        self._syncs += [self.host.submit(n, "sync", version, iteration, ref) for n in self.names]

    def post(self, weights: dict) -> None:
        """Partial rollout: put `weights` where the workers read them, without a "sync" request
        (they take them at their next token boundary, engines/rollout/mailbox.py)."""
        if self.shared is not None and weights is not self.shared:
            with torch.no_grad():
                for n, t in weights.items():
                    self.shared[n].copy_(t)

    def produce(self, iteration: int, requests, sampling, groups: queue.Queue,
                timeout_s: float) -> None:
        """Producer thread body: deal the iteration's prompts, put each finished group on `groups`,
        then an IterationEnd with the workers' events and stats. An error goes on `groups` for the
        consumer."""
        try:
            calls = [self.host.submit(n, "generate", iteration, requests[i::len(self.names)],
                                      sampling)
                     for i, n in enumerate(self.names)]
            syncs, self._syncs = self._syncs, []
            results = self.host.wait(syncs + calls, f"generating iteration {iteration}",
                                     on_emit=lambda g: groups.put(
                arrived(g)))
            done = results[len(syncs):]
            groups.put(IterationEnd([ev for events, _ in done for ev in events],
                                    [stats for _, stats in done]))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer thread
            groups.put(e)

    def close(self) -> None:
        if self.gate is not None:
            self.gate.open()  # a held worker must be free to answer the shutdown
        self.host.close()


def arrived(item):
    """A sealed group as it reaches the driver: stamped with the driver's clock (its transfer, where
    it crossed nodes, is recorded by the consumer: engines/schedules/common.py GroupReceiver)."""
    if isinstance(item, SealedGroup):
        item.arrived_at = now()
    return item
