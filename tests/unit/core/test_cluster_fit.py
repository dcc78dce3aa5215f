"""engine.placement and the check before a run on a running Ray cluster (core/devices/cluster.py),
and the clock estimate of core/record/clocks.py, on described nodes and round trips: no Ray needed.

A placement the cluster cannot hold is refused before any work (exit 2) with what is missing: a
resource no node holds, too few CPUs on the nodes holding it, or too few CPUs anywhere for the cells
alive at once."""
import pytest

from rlbench.core.config_files import load_config
from rlbench.core.devices import cluster
from rlbench.core.devices.placement import plan
from rlbench.core.errors import UserError
from rlbench.core.record import clocks
from rlbench.engines import launch
from rlbench.engines.ray_nodes import alive_together, custom_resources

from conftest import TINY

RAY = ["engine.launcher=ray", "engine.ray_address=10.0.0.1:6379"]


def nodes(*cpus: int) -> list[cluster.Node]:
    """head, n1, n2, ...: each with its CPUs and its own resource named after it."""
    names = ["head"] + [f"n{i}" for i in range(1, len(cpus))]
    return [cluster.Node(f"10.0.0.{i + 1}", {"CPU": float(c), name: 1.0,
                                             f"node:10.0.0.{i + 1}": 1.0}, name)
            for i, (name, c) in enumerate(zip(names, cpus))]


def wanted(sets: list[str], cell: str = "run") -> list[cluster.Demand]:
    cfg = load_config(TINY, RAY + sets)
    slots = plan(cfg.engine, "cpu", cfg.engine.num_devices).slots
    return cluster.demands(cell, slots, cfg.engine.placement, launch.sharing(slots))


def test_placed_workers_ask_for_their_nodes_resource():
    got = {d.worker: d.needs for d in wanted(["engine.schedule=periodic_async",
                                              "engine.placement.rollout=n1",
                                              "engine.placement.trainer=n2"])}
    assert got == {"rollout0": {"CPU": 1.0, "n1": cluster.PLACEMENT_SHARE},
                   "trainer0": {"CPU": 1.0, "n2": cluster.PLACEMENT_SHARE}}
    cfg = load_config(TINY, RAY + ["engine.placement.colocated=[n1, node:10.0.0.3]"])
    opts = [launch.ray_options(s, 1, cfg.engine.placement) for s in plan(cfg.engine, "cpu",
                                                                         2).slots]
    assert [o["resources"] for o in opts] == [{"n1": cluster.PLACEMENT_SHARE},
                                              {"node:10.0.0.3": cluster.PLACEMENT_SHARE}]
    assert all(o["num_cpus"] == 1 for o in opts)


def test_a_placement_that_fits_passes():
    cluster.check_fits(nodes(1, 1, 1), wanted(["engine.placement.colocated=[n1, n2]"]), "x", "")
    cluster.check_fits(nodes(0, 2), wanted(["engine.placement.colocated=n1"]), "x", "")


def test_a_resource_no_node_holds_is_named():
    with pytest.raises(UserError) as e:
        cluster.check_fits(nodes(1, 1, 1), wanted(["engine.placement.colocated=[n1, n3]"]),
                           "10.0.0.1:6379", "")
    msg = str(e.value)
    assert "'n3'" in msg and "colocated1" in msg and "no node" in msg and "n2 (10.0.0.3" in msg


def test_too_few_cpus_on_the_placed_node_says_how_many():
    with pytest.raises(UserError) as e:
        cluster.check_fits(nodes(4, 1, 1), wanted(["engine.placement.colocated=n1"]), "x", "")
    msg = str(e.value)
    assert "holding 'n1' have 1 CPU free" in msg and "need 2 CPU" in msg and "colocated0, colocated1" in msg


def test_interleaved_cells_count_together():
    """The run the cluster could not hold: three interleaved cells of 2 workers on 3 CPUs (each fits
    alone)."""
    cfg = load_config(TINY, RAY)
    cells = [(name, load_config(TINY, RAY + [f"engine.schedule={s}"])) for name, s in
             (("sync", "sync"), ("barrier", "periodic_async"), ("periodic_async",
                                                                "periodic_async"))]
    groups = alive_together(cfg, cells)
    assert len(groups) == 1 and "interleaved" in groups[0][0]
    every = [d for name, c in cells for d in wanted([f"engine.schedule={c.engine.schedule}"], name)]
    with pytest.raises(UserError) as e:
        cluster.check_fits(nodes(1, 1, 1), every, "10.0.0.1:6379", groups[0][0])
    msg = str(e.value)
    assert "has 3 CPU free" in msg and "need 6 at once" in msg and "run.interleave=false" in msg
    alone = [(n,
              c.model_copy(update={"run": c.run.model_copy(update={"interleave": False})})) for n, c in cells]
    assert [len(g) for _, g in alive_together(cfg, alone)] == [1, 1, 1]


@pytest.mark.parametrize("sets, key", [
    (["engine.placement.rolout=n1"], "unknown role 'rolout'"),
    (["engine.placement.colocated=[n1]"], "1 entries for 2 colocated"),
    (["engine.placement.trainer="], "a Ray resource name"),
])
def test_bad_placements_name_the_key(sets, key):
    with pytest.raises(UserError) as e:
        load_config(TINY, RAY + sets)
    assert key in str(e.value) and "engine.placement" in str(e.value)


def test_placement_needs_a_running_cluster():
    with pytest.raises(UserError,
                       match="engine.placement needs engine.launcher=ray and engine.ray_address"):
        load_config(TINY, ["engine.launcher=ray", "engine.placement.rollout=n1"])


def test_custom_resources_are_a_nodes_names():
    assert custom_resources({"CPU": 1, "memory": 5, "n1": 1, "node:10.0.0.2": 1,
                             "accelerator_type:A100": 1}) == ["n1"]


def test_the_shortest_round_trip_bounds_the_offset():
    """A node 50 ms ahead, probed through round trips with queueing on one leg: the estimate is
    within its stated uncertainty of the truth, and the uncertainty is the best round trip's half.
    """
    true = 0.050
    legs = [(0.004, 0.0005), (0.0004, 0.0006), (0.0002, 0.0030), (0.0020,
                                                                  0.0020)]  # (out, back) seconds
    probes, t = [], 100.0
    for out, back in legs:
        probes.append(clocks.Probe(t, t + out + true, t + out + back))
        t += 1.0
    est = clocks.estimate(probes, t0=90.0)
    assert est.rtt_s == pytest.approx(0.0010) and est.uncertainty_s == pytest.approx(0.0005)
    assert abs(est.offset_s - true) <= est.uncertainty_s
    assert est.at == pytest.approx(101.001 - 90.0)
    rec = clocks.record([clocks.estimate(probes[:1]), est], {"node_ip": "10.0.0.2"})
    assert rec["offset_s"] == est.offset_s and len(rec["estimates"]) == 2 and rec["moved_s"] > 0
    with pytest.raises(ValueError):
        clocks.estimate([])


def test_a_planted_clock_error_is_not_read_as_another_fault(monkeypatch):
    """RLBENCH_FAULT holds one fault: a node's clock error must leave the iteration hook alone (it
    once read 'n1:0.05' as the iteration to die at), and an exit planted at iteration 2 still fires
    there."""
    from rlbench.core.record.stages import _NodeClock
    from rlbench.planted import faults

    monkeypatch.setenv("RLBENCH_FAULT", "clock_skew:n1:-0.05")
    faults.at(0, "rollout")
    clock = _NodeClock()
    faults.clock_skew(["n2"], clock)
    assert clock.skew == 0.0
    faults.clock_skew(["n1"], clock)
    assert clock.skew == -0.05
    monkeypatch.setenv("RLBENCH_FAULT", "rollout_exit:2")
    monkeypatch.setattr(faults.os, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    faults.at(1, "rollout")
    faults.at(2, "trainer")
    with pytest.raises(SystemExit):
        faults.at(2, "rollout")
