#!/usr/bin/env python3
"""A Ray cluster of several nodes on this machine, to rehearse a multi-node run before a real
cluster.

    .venv/bin/python scripts/ray_cluster.py up --dir DIR [--nodes 3] [--cpus 1] [--rate-mbit 100 --delay-ms 5]
    .venv/bin/python scripts/ray_cluster.py shape --dir DIR --rate-mbit 100 --delay-ms 5
    .venv/bin/python scripts/ray_cluster.py link --dir DIR --node n1 down|up
    .venv/bin/python scripts/ray_cluster.py kill-node --dir DIR --node n1
    .venv/bin/python scripts/ray_cluster.py down --dir DIR

`up` starts a head (`head`) and worker nodes (`n1`, `n2`, ...) as separate raylets (`ray start`),
each holding a Ray resource named after it (so `engine.placement` can name it), with token
authentication (one token file, RAY_AUTH_MODE=token) and its own temporary folder. As root with
/dev/net/tun and iproute2, every worker node lives in a network namespace of its own and reaches the
others through a link made by scripts/link_switch.py (delay, rate, a finite queue; unshaped unless
asked); otherwise (`--plain`, or where namespaces cannot be made) every raylet shares this machine's
network. It prints the cluster as JSON: the address to attach to, the environment a driver needs
(the token), the nodes.

Nothing outside what it made is touched: the namespaces, interfaces and addresses are new (a private
10.x.y.0/24 no route of this machine uses), and `down` ends only the processes of its own namespaces
and those whose command line holds its own temporary folder, never `ray stop` (which ends every
raylet of the machine)."""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAY = str(Path(sys.executable).with_name("ray"))
# In the environment of every process of a cluster (they inherit it from `ray start`), where it can
# still be read: Ray's agents rename themselves (ray::DashboardAgent), so their command lines no longer
# tell whose they are, and later overwrite the environment as well; their parents do (descendants).
MARK = "RLBENCH_REHEARSAL_CLUSTER"


def netns_possible() -> str | None:
    """None where nodes can live in network namespaces here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("ip"):
        return "no `ip` (iproute2)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    probe = f"rlbc-probe-{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"ip netns add: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def free_subnet() -> str:
    """A 10.x.y.0/24 that no address or route of this machine uses (-> '10.x.y')."""
    used = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True,
                          text=True).stdout
    used += subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    for _ in range(100):
        prefix = f"10.{secrets.randbelow(50) + 200}.{secrets.randbelow(250) + 1}"
        if f"{prefix}." not in used:
            return prefix
    raise SystemExit("ray_cluster: no free 10.x.y.0/24 found")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def plan(args) -> dict:
    """The cluster to make: names, addresses, namespaces, interfaces."""
    cid = secrets.token_hex(3)
    why_not = "--plain" if args.plain else netns_possible()
    names = ["head"] + [f"n{i}" for i in range(1, args.nodes)]
    prefix = free_subnet() if why_not is None else None
    nodes = []
    for i, name in enumerate(names):
        nodes.append({"name": name, "resource": name, "cpus": args.cpus,
                      "ip": f"{prefix}.{i + 1}" if prefix else "127.0.0.1",
                      "netns": f"rlbc-{cid}-{name}" if prefix and i else None,
                      "tun": f"rlbc{cid}{i}" if prefix else None})
    port = free_port()
    return {"id": cid, "netns": why_not is None, "plain_reason": why_not, "nodes": nodes,
            "address": f"{nodes[0]['ip']}:{port}", "port": port, "temp_dir": f"/tmp/rlbc-{cid}",
            "link": {"rate_mbit": args.rate_mbit, "delay_ms": args.delay_ms, "limit": args.limit},
            "mtu": args.mtu, "object_store_mb": args.object_store_mb}


def ray_env(state: dict) -> dict:
    """What every process of the cluster, and a driver attaching to it, needs: the token."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": state["token"]}


def start_link(state: dict, folder: Path) -> None:
    """The namespaces, then the link between them (scripts/link_switch.py, which makes the
    interfaces)."""
    for node in state["nodes"]:
        if node["netns"]:
            subprocess.run(["ip", "netns", "add", node["netns"]], check=True)
    config = folder / "link.json"
    config.write_text(json.dumps({"mtu": state["mtu"], "nodes": state["nodes"],
                                  "link": state["link"]}))
    log = open(folder / "link.log", "w")
    proc = subprocess.Popen([sys.executable, str(HERE / "link_switch.py"), str(config)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    state["switch_pid"] = proc.pid
    for _ in range(100):
        if "ready" in (folder / "link.log").read_text() or proc.poll() is not None:
            break
        time.sleep(0.1)
    if proc.poll() is not None:
        raise SystemExit(f"ray_cluster: the link did not start:\n{(folder / 'link.log').read_text()}")


def ray_start(state: dict, node: dict, head: bool) -> None:
    """`ray start` for one node (in its namespace), holding the resource named after it."""
    args = [RAY, "start", f"--node-ip-address={node['ip']}", f"--num-cpus={node['cpus']}",
            f"--resources={json.dumps({node['resource']: 1})}", "--disable-usage-stats",
            f"--object-store-memory={state['object_store_mb'] << 20}", f"--temp-dir={state['temp_dir']}"]
    if head:
        args += ["--head", f"--port={state['port']}", "--include-dashboard=false"]
    else:
        args += [f"--address={state['address']}"]
    if node["netns"]:
        args = ["ip", "netns", "exec", node["netns"], *args]
    env = {**os.environ, **ray_env(state), MARK: state["id"]}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    if done.returncode:
        raise SystemExit(f"ray_cluster: ray start of {node['name']} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")


def wait_nodes(state: dict, alive: int, timeout_s: float = 120) -> None:
    """Until `alive` nodes are registered (or SystemExit)."""
    code = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR'); "
            "print(sum(n['Alive'] for n in ray.nodes()))")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run([sys.executable, "-c", code, state["address"]], env={**os.environ,
                                                                                  **ray_env(state)},
                             capture_output=True, text=True, timeout=120).stdout.strip()
        if out.isdigit() and int(out) >= alive:
            return
        time.sleep(1)
    raise SystemExit(f"ray_cluster: fewer than {alive} nodes alive after {timeout_s:.0f}s")


def up(args) -> dict:
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    state = plan(args)
    state["token"] = str(folder / "token")
    Path(state["token"]).write_text(secrets.token_hex(32))
    os.chmod(state["token"], 0o600)
    save(folder, state)
    try:
        if state["netns"]:
            start_link(state, folder)
            save(folder, state)
        for i, node in enumerate(state["nodes"]):
            ray_start(state, node, head=i == 0)
        wait_nodes(state, len(state["nodes"]))
    except BaseException:
        down(folder)
        raise
    return public(state)


def public(state: dict) -> dict:
    """What a user (or a test) needs: where to attach, the environment, the nodes and the link."""
    return {"address": state["address"], "env": ray_env(state), "netns": state["netns"],
            "plain_reason": state["plain_reason"], "link": state["link"],
            "nodes": [{k: n[k] for k in ("name", "resource", "ip", "netns",
                                         "cpus")} for n in state["nodes"]]}


def save(folder: Path, state: dict) -> None:
    (folder / "cluster.json").write_text(json.dumps(state, indent=1))


def load(folder: Path) -> dict:
    path = Path(folder) / "cluster.json"
    if not path.is_file():
        raise SystemExit(f"ray_cluster: no cluster in {folder} (no cluster.json)")
    return json.loads(path.read_text())


def own_pids(state: dict, node: dict | None = None) -> list[int]:
    """Processes of the cluster (or of one node): everything in its namespace(s), and every process
    whose command line holds the cluster's own temporary folder (the head's, and all of them without
    namespaces)."""
    pids = set()
    for n in state["nodes"]:
        if n["netns"] and (node is None or n is node):
            out = subprocess.run(["ip", "netns", "pids", n["netns"]], capture_output=True,
                                 text=True).stdout
            pids |= {int(p) for p in out.split()}
    if node is None or not node["netns"]:
        mark = state["temp_dir"].encode()
        env_mark = f"{MARK}={state['id']}".encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    marked = node is None and env_mark in (entry / "environ").read_bytes().split(b"\0")
                    if marked or mark in (entry / "cmdline").read_bytes():
                        pids.add(int(entry.name))
                except OSError:
                    pass
    pids |= descendants(pids)
    pids.discard(os.getpid())
    return sorted(pids)


def descendants(pids: set[int]) -> set[int]:
    """Every process below these (read from /proc/*/stat's parent ids)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out and child not in pids:
                out.add(child)
                todo.append(child)
    return out


def end(pids: list[int], grace_s: float) -> None:
    """SIGTERM, then SIGKILL what is left after grace_s."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.2)


def down(folder) -> None:
    state = load(folder)
    end(own_pids(state), 10.0)
    if state.get("switch_pid"):
        end([state["switch_pid"]], 5.0)
    for node in state["nodes"]:
        if node["netns"]:
            subprocess.run(["ip", "netns", "del", node["netns"]], capture_output=True)
    shutil.rmtree(state["temp_dir"], ignore_errors=True)
    (Path(folder) / "cluster.json").unlink()


def node_of(state: dict, name: str) -> dict:
    for n in state["nodes"]:
        if n["name"] == name:
            return n
    raise SystemExit(f"ray_cluster: no node {name!r} (nodes: {', '.join(n['name'] for n in state['nodes'])})")


def shape(folder, rate_mbit: float, delay_ms: float, limit: int | None) -> None:
    state = load(folder)
    if not state["netns"]:
        raise SystemExit("ray_cluster: the cluster has no link to shape (its nodes share this machine's network)")
    state["link"].update(rate_mbit=rate_mbit, delay_ms=delay_ms,
                         **({"limit": limit} if limit else {}))
    (Path(folder) / "link.json").write_text(json.dumps({"mtu": state["mtu"],
                                                        "nodes": state["nodes"],
                                                        "link": state["link"]}))
    save(Path(folder), state)
    os.kill(state["switch_pid"], signal.SIGHUP)
    time.sleep(0.2)


def link(folder, name: str, updown: str) -> None:
    """A node's interface down (its link lost: nothing in or out) or up again."""
    state = load(folder)
    node = node_of(state, name)
    if not node["netns"]:
        raise SystemExit(f"ray_cluster: node {name} has no link of its own (no namespace)")
    subprocess.run(["ip", "netns", "exec", node["netns"], "ip", "link", "set", node["tun"], updown],
                   check=True)


def kill_node(folder, name: str) -> list[int]:
    """Every process of one worker node killed at once (SIGKILL: a machine lost, no goodbye)."""
    state = load(folder)
    node = node_of(state, name)
    if node is state["nodes"][0]:
        raise SystemExit("ray_cluster: kill-node ends a worker node, not the head")
    if not node["netns"]:
        raise SystemExit("ray_cluster: kill-node needs nodes in namespaces (their processes told apart by it)")
    pids = own_pids(state, node)
    end(pids, 0.0)
    return pids


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--nodes", type=int, default=3, help="nodes, the head included")
    u.add_argument("--cpus", type=int, default=1, help="CPUs each node offers to Ray")
    u.add_argument("--plain", action="store_true",
                   help="no namespaces: every raylet on this machine's network")
    u.add_argument("--object-store-mb", type=int, default=1024)
    u.add_argument("--mtu", type=int, default=9000)
    for q in (u, s := sub.add_parser("shape")):
        q.add_argument("--rate-mbit", type=float, default=0.0, help="link rate (0: unshaped)")
        q.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay")
        q.add_argument("--limit", type=int, default=1000,
                       help="packets queued per direction (tail drop)")
    lk = sub.add_parser("link")
    lk.add_argument("--node", required=True)
    lk.add_argument("state", choices=("down", "up"))
    kn = sub.add_parser("kill-node")
    kn.add_argument("--node", required=True)
    sub.add_parser("down")
    for q in sub.choices.values():
        q.add_argument("--dir", required=True, help="where the cluster's state and token are kept")
    args = p.parse_args(argv)
    if args.cmd == "up":
        print(json.dumps(up(args), indent=1))
    elif args.cmd == "down":
        down(args.dir)
    elif args.cmd == "shape":
        shape(args.dir, args.rate_mbit, args.delay_ms, args.limit)
    elif args.cmd == "link":
        link(args.dir, args.node, args.state)
    else:
        print(json.dumps({"killed": kill_node(args.dir, args.node)}))


if __name__ == "__main__":
    main()
