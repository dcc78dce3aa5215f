"""Workers on the nodes of a Ray cluster (engine.launcher=ray): where engine.placement puts each
one, and whether the cluster can hold the run at all, checked before any work starts (exit 2, naming
what is missing; docs/platforms/ray.md).

A worker asks Ray for its device (a core on CPU, one GPU or NPU) and, where engine.placement names
one, a sliver of a resource only the chosen nodes hold: a custom one
(`ray start --resources='{"n1": 1}'`) or Ray's own `node:<ip>`. The check packs every worker alive
at once (interleaved cells keep all of theirs) onto the nodes the way Ray's scheduler must, most
constrained first, and where one does not fit it says which workers, which resource, and what each
node holds.

Pure Python over a description of the nodes (engines/ray_util.py `cluster_nodes` reads it from Ray).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rlbench.core.errors import UserError

# The share of its node's placement resource a worker asks for: any positive amount holds it on such
# a node, and this one lets up to 1000 workers share one (Ray counts resources in units of 1e-4).
PLACEMENT_SHARE = 0.001
# engine.placement's keys (core/record/stages.py Role)
PLACED_ROLES = ("colocated", "rollout", "trainer")
# The Ray resource each device kind's worker holds (engines/ray_util.py actor_resources asks it).
DEVICE_RESOURCE = {"cpu": "CPU", "cuda": "GPU", "npu": "NPU"}


@dataclass
class Node:
    """One alive node as Ray describes it: its address and the resources it has free now."""

    ip: str
    resources: dict[str, float]
    name: str = ""  # its own custom resource, where it has exactly one (what a user calls it)

    def label(self) -> str:
        shown = {k: v for k, v in sorted(self.resources.items()) if not k.startswith("node:")}
        held = ", ".join(f"{k} {v:g}" for k, v in shown.items())
        return f"{self.name or self.ip} ({self.ip}: {held or 'nothing free'})"


@dataclass
class Demand:
    """What one worker asks Ray for."""

    worker: str
    cell: str
    device: str  # the Ray resource of its device: CPU, GPU, NPU
    amount: float
    where: str | None = None  # the placement resource, or None: any node
    needs: dict[str, float] = field(init=False)

    def __post_init__(self):
        self.needs = {self.device: self.amount,
                      **({self.where: PLACEMENT_SHARE} if self.where else {})}


def node_of(placement: dict, slot) -> str | None:
    """The resource engine.placement names for a worker's slot: the role's value, or the worker's
    item of the role's list (worker rollout1 -> the list's item 1); None where the role is not
    placed."""
    value = placement.get(slot.role)
    if isinstance(value, list):
        return value[int(slot.worker[len(slot.role):])]
    return value


def placement_problem(placement: dict, counts: dict[str, int]) -> str | None:
    """engine.placement against the workers of each role (counts: role -> workers); a message, or
    None."""
    for role, value in placement.items():
        if role not in PLACED_ROLES:
            return f"engine.placement: unknown role {role!r} (allowed: {', '.join(PLACED_ROLES)})"
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str) and v.strip() for v in values):
            return (f"engine.placement.{role}: a Ray resource name (a node's custom resource, or "
                    f"node:<ip>) or a list of them, one per worker; got {value!r}")
        if isinstance(value, list) and role in counts and len(value) != counts[role]:
            return (f"engine.placement.{role}: {len(value)} entries for {counts[role]} {role} "
                    "worker(s); give one per worker, or one name for all of them")
    return None


def demands(cell: str, slots, placement: dict, sharing: dict[str, int]) -> list[Demand]:
    """The Ray resources each worker of a cell asks for (sharing: worker -> workers on its device).
    """
    out = []
    for slot in slots:
        amount = float(slot.threads) if slot.kind == "cpu" else 1.0 / sharing.get(slot.worker, 1)
        out.append(Demand(slot.worker, cell, DEVICE_RESOURCE[slot.kind], amount, node_of(placement,
                                                                                         slot)))
    return out


def check_fits(nodes: list[Node], wanted: list[Demand], address: str, together: str) -> None:
    """UserError (exit 2) where the workers cannot all be held at once by the nodes' free resources.
    together: why these workers are alive at once (e.g. "the interleaved cells sync,
    periodic_async")."""
    if not nodes:
        raise UserError(f"engine.ray_address={address}: the cluster has no alive node")
    free = [dict(n.resources) for n in nodes]
    order = sorted(wanted, key=lambda d: (d.where is None,
                                          -d.amount))  # placed workers first, largest first
    for d in order:
        fits = [i for i, f in enumerate(free)
                if all(f.get(k, 0.0) + 1e-9 >= v for k, v in d.needs.items())]
        if not fits:
            raise UserError(_missing(nodes, free, d, wanted, address, together))
        best = max(fits, key=lambda i: free[i].get(d.device,
                                                   0.0))  # spread, as Ray's default policy does
        for k, v in d.needs.items():
            free[best][k] -= v


def _missing(nodes: list[Node], free: list[dict], d: Demand, wanted: list[Demand], address: str,
             together: str) -> str:
    """What is missing for worker d: a node with its placement resource, or room on such nodes or
    anywhere."""
    cluster = "; ".join(n.label() for n in nodes)
    same = [w for w in wanted if w.where == d.where and w.device == d.device]
    names = ", ".join(f"{w.cell}/{w.worker}" if len({x.cell for x in wanted}) > 1 else w.worker
                      for w in same)
    need = sum(w.amount for w in same)
    if d.where is not None:
        holders = [n for n in nodes if d.where in n.resources]
        if not holders:
            verb = "asks" if len(same) == 1 else "ask"
            return (f"engine.placement: no node of the cluster at {address} holds the resource "
                    f"{d.where!r} that {names} {verb} for (nodes: {cluster}). Name a node's "
                    f"resource (custom, or node:<ip>).")
        have = sum(n.resources.get(d.device, 0.0) for n in holders)
        return (f"engine.placement: the nodes holding {d.where!r} have {have:g} {d.device} free, "
                f"but {names} need {need:g} {d.device} there{together and ' (' + together + ')'} "
                f"(nodes: {cluster}).")
    total = sum(n.resources.get(d.device, 0.0) for n in nodes)
    asked = sum(w.amount for w in wanted if w.device == d.device)
    return (f"engine.ray_address={address}: the cluster has {total:g} {d.device} free, but the "
            f"run's workers need {asked:g} at once{together and ' (' + together + ')'}; {d.worker} "
            f"finds no node with {d.amount:g} {d.device} left (nodes: {cluster}). Add nodes, lower "
            "engine.rollout_devices / engine.train_devices, or run the cells one at a time "
            "(run.interleave=false).")
