"""The driver's side of the data-parallel ranks (engines/trainer/ranks.py), shaped like the local
Trainer.

Schedules drive `begin / train / finish / weights / version` whatever holds the trainer: the local
`Trainer` in this process (tests, single_process sync) or `DataParallelTrainer` over rank workers in
pinned processes or Ray actors. Rank stage events come back with their step and reach the result
files through the schedule's recorder (`Recorder.extend`), the one route every event takes.
"""
from __future__ import annotations

import torch

from rlbench.engines.ray_util import RemoteWeights, from_numpy


class DataParallelTrainer:
    def __init__(self, host, policy, shared: dict | None):
        """host: the ranks' host (started); policy: the driver's model copy (its weights are the
        ranks' initial ones); shared: the shared-memory weights rank 0 publishes into (local host)
        or None (Ray)."""
        self.host, self.shared, self._policy = host, shared, policy
        self.names = host.workers
        self.version = 0
        self._pending: list = []  # this iteration's train calls, in order
        self._shares: list = []  # their answers, once waited for (wait_trained)
        self._dealt = 0  # groups dealt to the ranks this iteration
        if len(self.names) > 1:
            local = shared is not None
            address = self._one("rendezvous_address", "starting", local)
            timeout = host.timeout_s
            self._all(lambda n: (n, "join", address, timeout, local), "joining the process group")

    # ---------------------------------------------------------------- async schedules

    def begin(self) -> None:
        self._all(lambda n: (n, "begin"), "starting an iteration")
        self._pending, self._shares, self._dealt = [], [], 0

    def train(self, rec, k: int, groups: list, answers: dict) -> None:
        """Deal the groups to the ranks and return at once: the ranks train while the schedule goes
        on."""
        shares: dict[int, list] = {}
        for g in groups:
            shares.setdefault(self._dealt % len(self.names), []).append(g)
            self._dealt += 1
        for r, share in shares.items():
            mine = {g.prompt_index: answers[g.prompt_index] for g in share}
            self._pending.append(self.host.submit(self.names[r], "train", k, share, mine))

    def wait_trained(self, k: int) -> None:
        """Wait for the ranks' shares of the groups dealt so far. Training reads the weights and
        only the step writes them, so a schedule can wait here without keeping a weight publish
        out."""
        self._shares += self.host.wait(self._pending, f"training iteration {k}")
        self._pending = []

    def finish(self, rec, k: int) -> tuple[dict, dict]:
        """Wait for the ranks' shares, all-reduce and step; -> (the step stats, rewards of every
        group)."""
        self.wait_trained(k)
        shares, self._shares = self._shares, []
        steps = self._all(lambda n: (n, "step", k), f"stepping iteration {k}")
        self.version += 1
        rec.extend([ev for _, events in steps for ev in events])
        return _merged_stats([st for st, _ in steps]), {i: r for share in shares
                                                        for i, r in share.items()}

    # ---------------------------------------------------------------- sync (colocated ranks)

    def colocated_iteration(self, rec, k: int, requests: list, sampling, answers: dict):
        """Every rank runs its shard (prompt i on rank i mod ranks) start to step; -> the merged
        (groups in dispatch order, rewards, the step stats, rollout stats per rank)."""
        n = len(self.names)
        done = self._all(lambda name: (name, "iteration", k, requests[self.names.index(name)::n],
                                       sampling,
                                       answers), f"running iteration {k}")
        self.version += 1
        rec.extend([ev for _, events in done for ev in events])
        results = [res for res, _ in done]
        groups = sorted((g for res in results for g in res.groups), key=lambda g: g.prompt_index)
        rewards = {i: r for res in results for i, r in res.rewards.items()}
        return groups, rewards, _merged_stats([res.stats for res in results]), [res.rollout_stats
                                                                                for res in results]

    # ---------------------------------------------------------------- weights

    def publish(self, iteration: int | None):
        """The current weights where the rollout workers read them: rank 0 copies them into shared
        memory (recorded as its weight_sync of `iteration`) -> those tensors, or (Ray) puts them
        into its node's object store -> RemoteWeights (the rollout workers fetch them from
        there)."""
        if self.shared is not None:
            self._one("publish", "publishing weights", iteration)
            return self.shared
        return RemoteWeights(self._one("publish_ref", "publishing weights", iteration))

    def weights(self) -> dict:
        """Current weights, outside any iteration (evaluation, the final digest), in this
        process."""
        if self.shared is not None:
            return self.publish(None)
        return from_numpy(self._one("weights", "sending weights"))

    @property
    def policy(self):
        """The driver's copy of the model holding rank 0's current weights."""
        trained = self.weights()
        with torch.no_grad():
            for name, p in self._policy.named_parameters():
                p.copy_(trained[name])
        return self._policy

    def evaluate(self, requests: list, sampling) -> list:
        """Rank 0 generates the evaluation answers on its device (the driver holds none); ->
        groups."""
        return self._one("evaluate", "evaluating", requests, sampling)

    def device_facts(self, dtype) -> tuple[dict, dict]:
        """Rank 0's device description and measured peak (the driver holds no accelerator to
        ask)."""
        return self._one("device_facts", "describing its device", dtype)

    def close(self) -> None:
        self.host.close()

    # ---------------------------------------------------------------- plumbing

    def _one(self, method: str, doing: str, *args):
        return self.host.wait([self.host.submit(self.names[0], method, *args)], doing)[0]

    def _all(self, call, doing: str) -> list:
        return self.host.wait([self.host.submit(*call(n)) for n in self.names], doing)


def _merged_stats(per_rank: list[dict]) -> dict:
    """Rank 0's step stats (all-reduced: every rank has the same), with the per-group layout choices
    of engine.shared_prompt=auto gathered from every rank (each decided for its own groups)."""
    stats = dict(per_rank[0])
    if "shared_prompt_choices" in stats:
        stats["shared_prompt_choices"] = [c for st in per_rank for c
                                          in st.get("shared_prompt_choices", [])]
    return stats
