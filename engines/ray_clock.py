"""Every Ray node's clock mapped to the driver's (core/record/clocks.py says how and why), while a
run lasts: probed once before the first iteration and again every REESTIMATE_S seconds from a thread
of the driver; each estimate is handed to every actor of the node, whose stage events are then in
the driver's clock (core/record/stages.py `now`), and kept for results.json `clocks`.

The actors answer on a thread of their own (Ray's concurrency group `clock`, engines/ray_host.py),
so a probe is answered while the actor computes; an actor busy holding Python's lock delays the
answer, which the shortest-round-trip rule absorbs."""
from __future__ import annotations

import threading

from rlbench.core.record import clocks
from rlbench.core.record.stages import now

REESTIMATE_S = 10.0  # a run's clocks are estimated again this often
PROBES = 8  # round trips per node and estimate
CALL_TIMEOUT_S = 5.0  # a probe unanswered for this long (an actor busy or gone) is left out
CLOCK_GROUP = "clock"  # the actors' concurrency group for clock calls


class ClockSync:
    def __init__(self, ray, actors: dict, nodes: dict, driver_node: str, t0: float, record: dict,
                 interval_s: float = REESTIMATE_S):
        """actors: worker -> actor handle; nodes: worker -> its node as observed
        (engines/ray_nodes.py own_node); driver_node: the driver's node id; t0: the cell's time 0;
        record: where results.json's `clocks` is kept (node address -> clocks.record), updated in
        place."""
        self._ray, self.t0, self.record, self.interval_s = ray, t0, record, interval_s
        self.driver_node = driver_node
        self.by_node: dict[str, list] = {}
        self.info: dict[str, dict] = {}
        for worker, actor in actors.items():
            node = nodes[worker]
            self.by_node.setdefault(node["node"], []).append(actor)
            self.info[node["node"]] = {"node_ip": node["node_ip"],
                                       "node_resources": node["node_resources"],
                                       "driver_node": node["node"] == driver_node}
        self.history: dict[str, list] = {n: [] for n in self.by_node}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Estimate every node now (before the first iteration), then again every interval_s."""
        self.estimate_all()
        self._thread = threading.Thread(target=self._loop, name="clock-probes", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.estimate_all()
            # an actor gone: the run's own calls report it, not this thread
            except Exception:  # noqa: BLE001
                return

    def estimate_all(self) -> None:
        for node, actors in self.by_node.items():
            probes = self._probe(actors)
            if not probes:
                continue
            est = clocks.estimate(probes, self.t0)
            elsewhere = not self.info[node]["driver_node"]
            setter = [a.set_clock.options(concurrency_group=CLOCK_GROUP) for a in actors]
            self._ray.get([s.remote(est.offset_s, elsewhere) for s in setter],
                          timeout=CALL_TIMEOUT_S)
            self.history[node].append(est)
            self.record[self.info[node]["node_ip"]
                        + ("" if len(self._ips(node)) == 1 else f"/{node[:8]}")] = \
                clocks.record(self.history[node], {"node": node, **self.info[node]})

    def _ips(self, node: str) -> list[str]:
        """The nodes sharing this node's address (several raylets of one machine): told apart by id.
        """
        ip = self.info[node]["node_ip"]
        return [n for n, i in self.info.items() if i["node_ip"] == ip]

    def _probe(self, actors: list) -> list[clocks.Probe]:
        """PROBES round trips, spread over the node's actors, one at a time; unanswered ones left
        out."""
        out = []
        for i in range(PROBES):
            actor = actors[i % len(actors)]
            sent = now()
            try:
                remote = self._ray.get(actor.clock.options(concurrency_group=CLOCK_GROUP).remote(),
                                       timeout=CALL_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - busy past the timeout, or gone
                continue
            out.append(clocks.Probe(sent, remote, now()))
        return out

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=CALL_TIMEOUT_S + 1)


def start_clock_sync(actors: dict, observed: dict, t0: float, record: dict) -> ClockSync:
    """Map every actor's node clock to this process's now and every REESTIMATE_S from here on.
    actors: worker -> handle; observed: worker -> its observation (with its node)."""
    import ray  # inside: optional dependency (ray)

    sync = ClockSync(ray, actors, {w: observed[w] for w in actors},
                     ray.get_runtime_context().get_node_id(), t0,
                     record)
    sync.start()
    return sync
