"""rlbench on a running Ray cluster of three nodes (a head and two worker raylets on this machine,
made by scripts/ray_cluster.py; the worker nodes in network namespaces behind a link shaped to
100 Mbit/s and 5 ms): workers placed by node train exactly like the local run, a placement the
cluster cannot hold stops before any work (exit 2), a node's clock error is found and taken out, the
link is measured, and a killed node or a lost link ends the run with exit 3, the measured iterations
kept and the rest of the cluster left running.

Minutes in all (a cluster started twice, eight runs): marked `slow` as well as `e2e` (`-m slow`).
"""
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="engine.launcher=ray needs Ray: pip install 'rlbench[ray]'")

from rlbench.core.results import metrics, schema  # noqa: E402

from conftest import TINY  # noqa: E402
from support import cluster as rc  # noqa: E402
from support.cli import only_run, rlbench, sets  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PLACED = "engine.placement={colocated: [n1, n2], rollout: n1, trainer: n2}"
SPLIT = "engine.placement={rollout: n1, trainer: n2}"
SKEW_S = 0.05


def _netns_or_skip():
    if os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/dev/net/tun"):
        pytest.skip("a cluster of namespaced nodes needs root, iproute2 and /dev/net/tun")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three nodes (head, n1, n2; 3 CPUs each), the worker nodes behind a 100 Mbit/s, 5 ms link."""
    _netns_or_skip()
    made = rc.start(tmp_path_factory.mktemp("cluster"), rate_mbit=100, delay_ms=5)
    yield made
    assert rc.stop(made) == []  # nothing of the cluster left running


def run(cluster, out: Path, *overrides: str, ablation: str = "none", env: dict | None = None):
    ray = sets("engine.launcher=ray", f"engine.ray_address={cluster.address}", *overrides)
    return rlbench("run", "--config", TINY, "--out", out, "--ablation", ablation, "--no-progress",
                   "--no-report", *ray,
                   env={**cluster.env, **(env or {})}, timeout=600)


def test_cells_across_nodes_train_bitwise_like_the_local_run(cluster, tmp_path):
    proc = run(cluster, tmp_path / "ray", PLACED, ablation="async")
    assert proc.returncode == 0, proc.stderr[-3000:]
    local = rlbench("run", "--config", TINY, "--out", tmp_path / "local", "--ablation", "async",
                    "--no-progress", "--no-report", timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    where = {"colocated0": ["n1"], "colocated1": ["n2"], "rollout0": ["n1"], "trainer0": ["n2"]}
    for cell in ("sync", "periodic_async_barrier", "periodic_async"):
        far = schema.load_cell(only_run(tmp_path / "ray") / cell)
        near = schema.load_cell(only_run(tmp_path / "local") / cell)
        assert far["status"] == "complete", far["error"]
        assert [it["loss"] for it in far["iterations"]] == [it["loss"] for it in near["iterations"]]
        assert far["final_params_sha256"] == near["final_params_sha256"], cell
        nodes = {p["worker"]: p["observed"].get("node_resources") for p in far["placement"]}
        assert {w: n for w, n in nodes.items() if w in where} == {w: where[w] for w in nodes
                                                                   if w in where}
        far_ips = {n["ip"] for n in cluster.info["nodes"] if n["name"] in ("n1", "n2")}
        assert set(far["clocks"]) == far_ips


@pytest.mark.parametrize("placement,missing", [
    ("engine.placement={colocated: [n1, n9]}", "no node of the cluster at"),
    ("engine.placement={colocated: n1}", "the nodes holding 'n1' have 3 CPU free, but"),
])
def test_a_placement_the_cluster_cannot_hold_stops_before_any_work(cluster, tmp_path, placement,
                                                                   missing):
    wide = "colocated: n1" in placement
    extra = ["engine.rollout_devices=2", "engine.train_devices=2"] if wide else []
    proc = run(cluster, tmp_path, placement, *extra)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert missing in proc.stderr and "n1 (" in proc.stderr  # what the nodes hold is named
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # no run folder: nothing started


@pytest.mark.parametrize("skew", [SKEW_S, -SKEW_S])
def test_a_nodes_clock_error_is_found_and_taken_out(cluster, tmp_path, skew):
    proc = run(cluster, tmp_path, "engine.schedule=periodic_async", SPLIT,
               env={"RLBENCH_FAULT": f"clock_skew:n1:{skew}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = schema.load_cell(only_run(tmp_path) / "periodic_async")
    ip = {n["name"]: n["ip"] for n in cluster.info["nodes"]}
    n1, n2 = res["clocks"][ip["n1"]], res["clocks"][ip["n2"]]
    # one machine's clock underneath: the planted error is all there is to find, within the
    # estimate's bound
    assert abs(n1["offset_s"] - skew) <= n1["uncertainty_s"] + 1e-3, n1
    assert abs(n2["offset_s"]) <= n2["uncertainty_s"] + 1e-3, n2
    events = schema.load_events(only_run(tmp_path) / "periodic_async")
    # a group leaves n1 (its clock) and reaches the driver (its own): never before it left
    assert all(e["end"] >= e["start"] for e in events if e["stage"] == "group_transfer")
    assert all(0 <= e["start"] <= e["end"] <= res["wall_s_total"] for e in events)
    prev = None
    for it in res["iterations"]:
        mine = [e for e in events if e.get("iteration") == it["iteration"]]
        trainer = [e for e in mine if e["worker"] != "rollout0"]
        # the rollout node's events fall inside the window its trainer and driver make: the TPSPD
        # window is the one a single clock would give
        assert metrics.iteration_window(mine, prev) == metrics.iteration_window(trainer, prev)
        prev = it["end"]
        sync = min(e["start"] for e in trainer if e["stage"] == "weight_sync")
        fetch = min(e["start"] for e in mine
                    if e["worker"] == "rollout0" and e["stage"] == "weight_transfer")
        assert fetch >= sync  # the weights are fetched after the trainer began to publish them


def test_env_measures_the_shaped_link(cluster):
    proc = rlbench("env", "--ray-address", cluster.address, env=cluster.env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    links = json.loads(proc.stdout[proc.stdout.index("{"):])["cluster"]["links"]
    assert len(links) == 3
    for link in links:
        # 100 Mbit/s less the headers; a round trip crosses the 5 ms delay twice
        assert 0.06 <= link["gbps"] <= 0.1, link
        assert link["rtt_s"] >= 0.010, link


# a node killed (SIGKILL to every process of n1) or cut off (n1's link down, its processes alive)
FAULTS = {"killed node": ("kill-node", "--node", "n1"), "lost link": ("link", "--node", "n1", "down")}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_lost_node_ends_the_run_with_exit_3_and_the_cluster_stays(tmp_path_factory, fault):
    _netns_or_skip()
    own = rc.start(tmp_path_factory.mktemp("cluster-fault"))
    try:
        out = tmp_path_factory.mktemp("fault")
        struck: dict = {}

        def strike_after_three_iterations():
            deadline = time.monotonic() + 400
            while time.monotonic() < deadline:
                lines = list(out.glob("*/periodic_async/iterations.jsonl"))
                if lines and len(lines[0].read_text().splitlines()) >= 3:
                    struck["at"] = time.monotonic()
                    own.script(*FAULTS[fault])
                    return
                time.sleep(0.2)

        striker = threading.Thread(target=strike_after_three_iterations)
        striker.start()
        proc = run(own, out, "engine.schedule=periodic_async", "run.iterations=200",
                   "engine.hang_timeout_s=30", SPLIT)
        ended = time.monotonic()
        striker.join()
        assert "at" in struck, proc.stderr[-3000:]
        assert proc.returncode == 3, proc.stderr[-3000:]
        assert ended - struck["at"] <= 30 + 15  # the watchdog's time, and the run's wind-down
        res = schema.load_cell(only_run(out) / "periodic_async")
        assert res["status"] == "failed" and "rollout0" in res["error"]
        assert len(res["iterations"]) >= 3
        if fault == "lost link":
            own.script("link", "--node", "n1", "up")
        after = own.ray_state()
        assert {"head", "n2"} <= set(after["alive"])  # n1: dead, or seen dead late, or back
        assert all(state == "DEAD" for _, state in after["actors"])  # the run's actors ended
        raylets = subprocess.run(["pgrep", "-f", own.state["temp_dir"]], capture_output=True,
                                 text=True)
        assert raylets.stdout.split()  # the head and n2 run on: rlbench stopped only its own
        workers = subprocess.run(["pgrep", "-f", "_RayWorker"], capture_output=True, text=True)
        assert workers.stdout.strip() == ""  # no actor of the run alive on any node
    finally:
        assert rc.stop(own) == []
