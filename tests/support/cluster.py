"""A Ray cluster of several nodes on this machine for the tests (scripts/ray_cluster.py): started
before a module's tests, stopped after them, and checked to have left no process behind.

Each node is a raylet of its own holding a resource named after it (head, n1, n2, ...); as root with
network namespaces, the worker nodes reach each other through a link made by scripts/link_switch.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ray_cluster.py"
sys.path.insert(0, str(SCRIPT.parent))
from ray_cluster import descendants  # noqa: E402  the script's own: what `down` ends is what is looked for


class Cluster:
    """A running cluster: where to attach, the environment a driver needs, its nodes."""

    def __init__(self, folder: Path, info: dict):
        self.folder, self.info = folder, info
        self.address = info["address"]
        self.env = info["env"]
        self.state = json.loads((folder / "cluster.json").read_text())

    def script(self, *args: str) -> str:
        done = subprocess.run([sys.executable, str(SCRIPT), *args, "--dir", str(self.folder)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def pids(self) -> list[int]:
        """Processes whose command line holds the cluster's temporary folder or whose environment
        holds its mark (scripts/ray_cluster.py MARK), and those in its namespaces."""
        mark = self.state["temp_dir"].encode()
        env_mark = f"RLBENCH_REHEARSAL_CLUSTER={self.state['id']}".encode()  # Ray's renamed agents
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    env = (entry / "environ").read_bytes().split(b"\0")
                    if mark in (entry / "cmdline").read_bytes() or env_mark in env:
                        found.add(int(entry.name))
                except OSError:
                    pass
        for node in self.state["nodes"]:
            if node["netns"]:
                out = subprocess.run(["ip", "netns", "pids", node["netns"]], capture_output=True,
                                     text=True)
                found |= {int(p) for p in out.stdout.split()}
        found.discard(os.getpid())
        return sorted(found)

    def ray_state(self) -> dict:
        """{"alive": node resource names alive, "actors": [(class, state)]}, read by a driver of its
        own."""
        code = ("import json, sys, ray; from ray._private import state\n"
                "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                "alive = [k for n in ray.nodes() if n['Alive'] for k in n['Resources']\n"
                "         if k in ('head', 'n1', 'n2', 'n3')]\n"
                "acts = [(a['ActorClassName'], a['State']) for a in state.actors().values()]\n"
                "print(json.dumps({'alive': sorted(alive), 'actors': acts}))")
        done = subprocess.run([sys.executable, "-c", code, self.address],
                              env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


def start(folder: Path, *, nodes: int = 3, cpus: int = 3, rate_mbit: float = 0.0,
          delay_ms: float = 0.0) -> Cluster:
    folder.mkdir(parents=True, exist_ok=True)
    args = ["up", "--dir", str(folder), "--nodes", str(nodes), "--cpus", str(cpus),
            "--rate-mbit", str(rate_mbit), "--delay-ms", str(delay_ms)]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300)
    if done.returncode:
        raise RuntimeError(f"ray_cluster.py up failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return Cluster(folder, json.loads(done.stdout))


def stop(cluster: Cluster) -> list[int]:
    """Stop the cluster; -> the processes of it (and their descendants, taken before: Ray's agents
    rename themselves) still alive afterwards (none expected)."""
    before = set(cluster.pids()) | descendants(cluster.pids())
    cluster.script("down")
    time.sleep(1)
    return sorted(p for p in before | set(cluster.pids()) if alive(p))


def alive(pid: int) -> bool:
    """Running, not a zombie awaiting its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"

