"""The nodes of a Ray cluster as rlbench sees them (engine.launcher=ray; docs/platforms/ray.md):
what each alive node holds, the check before a run that the cluster can hold every worker alive at
once (core/devices/cluster.py), each actor's own node for results.json, and the network interface a
trainer rank's gloo group must use on its node."""
from __future__ import annotations

import fcntl
import os
import socket
import struct

from rlbench.core import schedules
from rlbench.core.devices import cluster
from rlbench.core.devices import device as dev
from rlbench.core.devices.placement import plan
from rlbench.engines import launch
from rlbench.engines.ray_util import attach
from rlbench.engines.schedules import engine_of

# Ray's own resources: a node's other ones are custom (what `ray start --resources` gave it: its
# name here).
_RAY_OWN = ("CPU", "GPU", "NPU", "memory", "object_store_memory")


def custom_resources(resources: dict) -> list[str]:
    """A node's custom resources (not Ray's own, not node:<ip>, not accelerator_type:...)."""
    return sorted(k for k in resources if k not in _RAY_OWN and ":" not in k)


def cluster_nodes(ray) -> list[cluster.Node]:
    """Every alive node with what it has free now (its totals where Ray does not say)."""
    try:
        # inside: optional dependency (ray); a private API: free resources per node (totals: the
        # fallback)
        from ray._private import state

        free = state.available_resources_per_node()
    except Exception:  # noqa: BLE001 - an API that moved: the totals still bound what fits
        free = {}
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        held = free.get(n["NodeID"], n["Resources"])
        names = custom_resources(n["Resources"])
        out.append(cluster.Node(n["NodeManagerAddress"], {k: float(v) for k, v in held.items()
                                                          if k not in ("memory",
                                                                       "object_store_memory")},
                                names[0] if len(names) == 1 else ""))
    return out


def ray_slots(cfg) -> list:
    """The workers a cell runs as Ray actors: all of its slots, or where its trainer runs in the
    driver (the schedule record's in_process) its rollout workers only, or none where all of it
    does."""
    spec = schedules.of(cfg)
    slots = plan(cfg.engine, dev.resolve_kind(cfg.engine.device), cfg.engine.num_devices).slots
    if spec.in_process(cfg):
        return [] if engine_of(spec).build_in_process else [s for s in slots if s.role == "rollout"]
    return slots


def alive_together(base, cells) -> list[tuple[str, list]]:
    """[(why, [(cell, cfg)])]: the cells whose workers are alive at once: all of them where they
    take turns (run.interleave, bench/run/interleave.py), else each alone."""
    cells = [(name, cfg) for name, cfg in cells if cfg.engine.launcher == "ray"] or [("run", base)]
    if len(cells) > 1 and any(cfg.run.interleave for _, cfg in cells):
        groups: dict = {}
        for name, cfg in cells:
            groups.setdefault(cfg.run.turn_group or cfg.run.workload, []).append((name, cfg))
        return [(f"the interleaved cells {', '.join(n for n, _ in g)} keep their workers alive "
                 f"together", g)
                for g in groups.values()]
    return [("", [c]) for c in cells]


def check_cluster(base, cells) -> None:
    """engine.launcher=ray on a running cluster (engine.ray_address): every group of workers alive
    at once fits the nodes' free resources, where engine.placement puts them (UserError, exit 2,
    naming what is missing). Attaches for a moment and detaches; a local instance (no address) is
    sized for the run."""
    configs = [cfg for _, cfg in cells] or [base]
    address = next((c.engine.ray_address for c in configs if c.engine.launcher == "ray"), None)
    if not address:
        return
    import ray  # inside: optional dependency (ray)

    attach(ray, address)
    try:
        nodes = cluster_nodes(ray)
    finally:
        ray.shutdown()
    for why, group in alive_together(base, cells):
        wanted = []
        for name, cfg in group:
            slots = ray_slots(cfg)
            wanted += cluster.demands(name, slots, cfg.engine.placement, launch.sharing(slots))
        cluster.check_fits(nodes, wanted, address, why)


def own_node(ray) -> dict:
    """This actor's node: its id, address and custom resources (what engine.placement names)."""
    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    mine = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
    return {"node": node_id, "node_ip": ray.util.get_node_ip_address(),
            "node_resources": custom_resources(mine.get("Resources", {}))}


def interface_of(address: str) -> str | None:
    """The network interface holding `address` on this node (None: none does), so that gloo's group
    binds where the other ranks can reach it, not where the host name happens to resolve."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                request = struct.pack("256s", name.encode()[:15])
                raw = fcntl.ioctl(s.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue
        if socket.inet_ntoa(raw[20:24]) == address:
            return name
    return None


def gloo_interface(address: str) -> None:
    """GLOO_SOCKET_IFNAME for a rank whose node is `address` (unless the user set it)."""
    name = interface_of(address)
    if name and not os.environ.get("GLOO_SOCKET_IFNAME"):
        os.environ["GLOO_SOCKET_IFNAME"] = name
