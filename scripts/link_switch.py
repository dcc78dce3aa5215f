#!/usr/bin/env python3
"""A network link between the nodes of a rehearsal cluster on one machine, in user space.

Each node gets a TUN interface (its own network namespace, or the machine's own for the head)
holding its address; every IPv4 packet a node sends to another node's address comes out of its TUN
here and is written into the destination node's TUN after the link's delay, at the link's rate,
behind a queue of `limit` packets (tail drop), as `tc netem delay D rate R limit N` would do on a
veth pair. This kernel may lack netem (the `sch_netem` module), which is why the link is made here;
every pair of nodes has a directed pipe of its own, so A->B traffic never queues behind A->C
traffic.

    link_switch.py CONFIG.json        # runs until SIGTERM; SIGHUP re-reads the link settings

CONFIG: {"mtu": 9000, "nodes": [{"name": "head", "netns": null, "ip": "10.76.0.1", "tun": "rlbt0"},
...],
         "link": {"rate_mbit": 100, "delay_ms": 5, "limit": 1000}}   rate_mbit 0: unshaped.

It touches nothing but the TUN interfaces it creates (they vanish when it ends) and the addresses of
the CONFIG, all chosen by scripts/ray_cluster.py from a private range."""
from __future__ import annotations

import fcntl
import heapq
import itertools
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def open_tun(name: str) -> int:
    """A new TUN interface `name` in this namespace; -> its file descriptor (the interface ends with
    it)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def ip(netns: str | None, *args: str) -> None:
    cmd = (["ip", "netns", "exec", netns] if netns else []) + ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True)


def attach(node: dict, prefix: int, mtu: int) -> int:
    """Create the node's TUN here, move it into the node's namespace, give it the node's address."""
    fd = open_tun(node["tun"])
    if node.get("netns"):
        ip(None, "link", "set", node["tun"], "netns", node["netns"])
    ns = node.get("netns")
    ip(ns, "addr", "add", f"{node['ip']}/{prefix}", "dev", node["tun"])
    ip(ns, "link", "set", node["tun"], "mtu", str(mtu), "up")
    if ns:
        ip(ns, "link", "set", "lo", "up")
    return fd


class Pipe:
    """One direction between two nodes: serialisation at `rate` bytes/s, then `delay` s in flight.
    """

    def __init__(self):
        self.busy_until = 0.0  # when the last queued packet has left the sender
        self.queued = 0  # packets in the pipe (serialising or in flight)

    def admit(self, size: int, now: float, link: dict) -> float | None:
        """-> when the packet arrives, or None where the queue is full (dropped)."""
        if self.queued >= link["limit"]:
            return None
        rate = link["rate_mbit"] * 1e6 / 8
        depart = max(now, self.busy_until) + (size / rate if rate > 0 else 0.0)
        self.busy_until = depart
        self.queued += 1
        return depart + link["delay_ms"] / 1e3


def serve(config: dict, config_path: str) -> None:
    nodes = config["nodes"]
    link = dict(config["link"])
    fds = {n["ip"]: attach(n, config.get("prefix", 24), config.get("mtu", 9000)) for n in nodes}
    by_fd = {fd: a for a, fd in fds.items()}
    pipes = {(a, b): Pipe() for a in fds for b in fds if a != b}
    heap: list = []
    seq = itertools.count()
    reload = []
    signal.signal(signal.SIGHUP, lambda *_: reload.append(1))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    poll = select.epoll()
    for fd in by_fd:
        poll.register(fd, select.EPOLLIN)
    print("ready", flush=True)
    while True:
        if reload:
            reload.clear()
            with open(config_path) as f:
                link = dict(json.load(f)["link"])
        timeout = max(0.0, heap[0][0] - time.monotonic()) if heap else 1.0
        try:
            ready = poll.poll(timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for fd, _ in ready:
            src = by_fd[fd]
            for _ in range(64):  # drain what is there, a bounded number at a time
                try:
                    pkt = os.read(fd, 65536)
                except (BlockingIOError, OSError):
                    break
                if len(pkt) < 20 or pkt[0] >> 4 != 4:
                    continue  # IPv4 only
                dst = ".".join(map(str, pkt[16:20]))
                if dst not in fds or dst == src:
                    continue
                pipe = pipes[(src, dst)]
                at = pipe.admit(len(pkt), now, link)
                if at is not None:
                    heapq.heappush(heap, (at, next(seq), dst, pipe, pkt))
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _, _, dst, pipe, pkt = heapq.heappop(heap)
            pipe.queued -= 1
            try:
                os.write(fds[dst], pkt)
            except OSError:
                pass  # the destination's interface is down: the packet is lost, as on a cut link


def main() -> None:
    path = sys.argv[1]
    with open(path) as f:
        config = json.load(f)
    serve(config, path)


if __name__ == "__main__":
    main()
