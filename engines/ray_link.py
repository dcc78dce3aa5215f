"""`rlbench env --ray-address`: the link between every two nodes of a running Ray cluster, measured
on the path a run's weights and groups take (core/costmodel/link.py prices it):

- round trip: an actor on one node calls an actor on the other (a message and its answer),
  ROUND_TRIPS times; the shortest is the link's, the median what a busy node sees;
- transfer: an actor on one node puts an object into its node's object store, an actor on the other
  fetches it (as a rollout worker fetches the weights trainer rank 0 published): once small (SMALL
  bytes: the fixed part, Ray's request round trips) and at sizes doubling from LARGE until a fetch
  takes TARGET_S; the rate is the large size's extra bytes over its extra seconds, the fixed part
  what the small one took beyond its bytes.

The probes hold no CPU (num_cpus=0) and are gone when it returns; nothing but their own objects is
sent."""
from __future__ import annotations

import itertools
import statistics
import time

from rlbench.engines.ray_nodes import cluster_nodes
from rlbench.engines.ray_util import attach

ROUND_TRIPS = 20
# above Ray's inline limit (100 KiB): it goes through the object store as weights do
SMALL = 256 << 10
LARGE = 8 << 20
MOST = 512 << 20
TARGET_S = 1.0
MAX_PAIRS = 6


class _Probe:
    """An actor on one node (engines/ray_link.py measure_pair)."""

    def ping(self) -> None:
        return None

    def round_trips(self, other, n: int) -> list[float]:
        import ray  # inside: optional dependency (ray)

        out = []
        for _ in range(n):
            t = time.perf_counter()
            ray.get(other.ping.remote())
            out.append(time.perf_counter() - t)
        return out

    def put(self, nbytes: int) -> list:
        import numpy as np  # inside: the probe actor's own import (it runs on another node)
        import ray  # inside: optional dependency (ray)

        # in a list: the reference, not the bytes, goes back
        return [ray.put(np.ones(nbytes, dtype=np.uint8))]

    def fetch(self, refs: list) -> float:
        import ray  # inside: optional dependency (ray)

        t = time.perf_counter()
        ray.get(refs[0])
        return time.perf_counter() - t


def measure_pair(ray, probe, a, b) -> dict:
    """Round trips from a to b, and transfers from a's object store to b."""
    rtts = ray.get(probe[a].round_trips.remote(probe[b], ROUND_TRIPS))

    def transfer(nbytes: int) -> float:
        refs = ray.get(probe[a].put.remote(nbytes))
        return ray.get(probe[b].fetch.remote(refs))

    small = min(transfer(SMALL) for _ in range(3))
    size, took = LARGE, transfer(LARGE)
    while took < TARGET_S and size < MOST:
        size *= 2
        took = transfer(size)
    rate = (size - SMALL) / max(took - small, 1e-9)
    return {"rtt_s": min(rtts), "rtt_median_s": statistics.median(rtts), "latency_s": min(rtts) / 2,
            "bytes_per_s": rate, "gbps": rate * 8 / 1e9,
            "overhead_s": max(0.0, small - SMALL / rate),
            "small_bytes": SMALL, "small_s": small, "large_bytes": size, "large_s": took}


def timed_transfers(ray, probe, a, b, link: dict, sizes: list[int]) -> list[dict]:
    """One transfer of each size (bytes, e.g. a model's weights) from a to b, beside what the link
    measured just before predicts for it (overhead_s + bytes / rate): a check of the cost model's
    weight-sync term."""
    out = []
    for nbytes in sizes:
        refs = ray.get(probe[a].put.remote(nbytes))
        took = ray.get(probe[b].fetch.remote(refs))
        del refs  # the object leaves both nodes' stores before the next one
        predicted = link["overhead_s"] + nbytes / link["bytes_per_s"]
        out.append({"bytes": nbytes, "measured_s": took, "predicted_s": predicted,
                    "error": predicted / took - 1})
    return out


def measure_cluster(address: str, transfer_bytes: list[int] = ()) -> dict:
    """Every pair of alive nodes (up to MAX_PAIRS), and the slowest link: what a run across them is
    bound by; transfer_bytes: sizes also sent once each over the slowest link and set beside its
    prediction."""
    # inside: optional dependency (ray)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    attach(ray, address)
    try:
        nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        names = {n.ip: n.name for n in cluster_nodes(ray)}
        remote = ray.remote(num_cpus=0)(_Probe)
        on = {nid: NodeAffinitySchedulingStrategy(nid, soft=False) for nid in nodes}
        probe = {nid: remote.options(scheduling_strategy=on[nid]).remote() for nid in nodes}
        label = {nid: names.get(n["NodeManagerAddress"]) or n["NodeManagerAddress"]
                 for nid, n in nodes.items()}
        links = []
        for a, b in list(itertools.combinations(sorted(nodes), 2))[:MAX_PAIRS]:
            links.append({"from": label[a], "to": label[b], "pair": (a, b),
                          **measure_pair(ray, probe, a, b)})
        slowest = min(links, key=lambda x: x["bytes_per_s"]) if links else None
        if slowest and transfer_bytes:
            slowest["transfers"] = timed_transfers(ray, probe, *slowest["pair"], slowest,
                                                   list(transfer_bytes))
        for p in probe.values():
            ray.kill(p)
    finally:
        ray.shutdown()
    for x in links:
        x.pop("pair")
    return {"address": address, "nodes": [{"node": nid, "ip": n["NodeManagerAddress"],
                                           "name": label[nid]}
                                          for nid, n in nodes.items()],
            "links": links, "slowest": slowest,
            "as_options": (f"--link-gbps {slowest['gbps']:.4g} --link-latency-ms "
                           f"{1e3 * slowest['latency_s']:.3g} --link-overhead-ms "
                           f"{1e3 * slowest['overhead_s']:.3g}" if slowest else None)}
