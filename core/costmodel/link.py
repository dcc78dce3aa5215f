"""The link between nodes as a term of the cost model: what weight sync, group transfer and the
gradient all-reduce cost once a run spans several nodes
(docs/architecture/cost-model.md, 'The link between nodes').

A transfer of B bytes between two nodes costs `overhead_s + B / bytes_per_s`: the fixed part is the
round trips a transfer starts with (Ray's object pull: ask the owner where the object is, ask that
node for it), the rest the bytes at the link's rate. `rlbench env --ray-address` measures both on
the path a run uses (Ray's object store between two nodes, at two sizes), a run on several nodes
measures its own weight transfers, and a user states them (`rlbench plan --link-gbps`, `rlbench
simulate --link-gbps`).

Where the devices sit (devices_per_node), per iteration:

- sync (colocated ranks over N nodes): a ring all-reduce of the gradients over the nodes, 2 (N - 1)
  steps of B / N bytes each (each step a message: one-way latency, not a Ray pull);
- split pools (rollout and training pools on nodes of their own): the weights to the rollout nodes,
  each fetching from a node that holds them already (Ray pulls from any copy, so the holders double
  each round: ceil(log2(1 + rollout nodes)) transfers in a row); the last group's two crossings (its
  rollout node -> the driver -> its trainer rank's node), which delay the iteration's end; the
  gradient all-reduce over the training pool's nodes.

The terms are added to the iteration, serially: an upper bound where a schedule overlaps them
(bounded staleness fetches the next weights while it generates). Units: seconds, bytes."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rlbench.core.errors import UserError

# a pickled group: a token id and its behaviour log-prob per token (stated)
GROUP_BYTES_PER_TOKEN = 16


@dataclass(frozen=True)
class Link:
    bytes_per_s: float  # payload rate of a bulk transfer
    latency_s: float  # one-way latency of a small message (half its round trip)
    overhead_s: float  # fixed seconds of one Ray object transfer (its request round trips)
    source: str  # measured (where, how), or stated by the user

    def transfer_s(self, nbytes: float) -> float:
        """One Ray object of nbytes from one node to another."""
        return self.overhead_s + nbytes / self.bytes_per_s

    def message_s(self, nbytes: float) -> float:
        """One message of nbytes on an open connection (a collective's step)."""
        return self.latency_s + nbytes / self.bytes_per_s

    def to_dict(self) -> dict:
        return {**asdict(self), "gbps": self.bytes_per_s * 8 / 1e9}


def stated(gbps: float | None, latency_ms: float | None, option: str = "--link-gbps",
           overhead_ms: float | None = None) -> Link | None:
    """The user's link (None where no rate is given); a transfer's fixed part is overhead_ms where
    given (`rlbench env --ray-address` measures it), else taken as one round trip."""
    if gbps is None:
        if latency_ms is not None or overhead_ms is not None:
            raise UserError("--link-latency-ms and --link-overhead-ms need --link-gbps (the link's "
                            "rate)")
        return None
    if overhead_ms is not None:
        if overhead_ms < 0:
            raise UserError(f"--link-overhead-ms {overhead_ms}: must be >= 0")
        base = stated(gbps, latency_ms, option)
        return Link(base.bytes_per_s, base.latency_s, overhead_ms / 1e3,
                    f"{base.source}, {overhead_ms:g} ms per transfer (--link-overhead-ms)")
    if gbps <= 0:
        raise UserError(f"{option} {gbps}: must be > 0 (Gbit/s)")
    lat = (latency_ms if latency_ms is not None else 0.05) / 1e3
    if lat < 0:
        raise UserError(f"--link-latency-ms {latency_ms}: must be >= 0")
    why = ("" if latency_ms is not None
           else ", latency 0.05 ms assumed (a data-centre network's order)")
    return Link(gbps * 1e9 / 8, lat, 2 * lat, f"stated: {option} {gbps:g}{why}")


@dataclass(frozen=True)
class NodeLayout:
    """The devices on nodes joined by one link, and what crosses it."""

    link: Link
    devices_per_node: int
    weight_bytes: float  # the model's parameters (and so its gradients) in bytes
    group_bytes: float  # one finished group as it travels

    def nodes(self, devices: int) -> int:
        return max(1, math.ceil(devices / self.devices_per_node))

    def allreduce_s(self, nodes: int) -> float:
        return 0.0 if nodes <= 1 else 2 * (nodes - 1) * self.link.message_s(self.weight_bytes
                                                                            / nodes)

    def terms(self, colocated: bool, rollout_devices: int, train_devices: int) -> dict[str, float]:
        """Seconds per iteration the link adds, by term (module docstring); sync: colocated on the
        sum."""
        if colocated or self.nodes(rollout_devices + train_devices) == 1:
            return {"allreduce": self.allreduce_s(self.nodes(rollout_devices + train_devices))}
        rollout_nodes = self.nodes(rollout_devices)
        rounds = math.ceil(math.log2(1 + rollout_nodes))
        return {"weight_sync": rounds * self.link.transfer_s(self.weight_bytes),
                "group_transfer": 2 * self.link.transfer_s(self.group_bytes),
                "allreduce": self.allreduce_s(self.nodes(train_devices))}
