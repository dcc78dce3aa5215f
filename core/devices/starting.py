"""How a run's processes are created: the multiprocessing context of cell processes and of local
workers.

A process that imports torch and transformers spends ~3.5 s of CPU doing so, and a cell has three
(its driver and, on the smallest layout, two workers): most of a tiny cell's start-up. Every process
of a run is therefore forked from a *fork server* that has imported them once (Python's "forkserver"
context, its preload list below): `rlbench run`'s server creates the cell processes (and, first, the
process of the checks before the run that need torch: bench/run/around.py `preflight`; `rlbench run`
itself imports neither; where it has them already, a fork of a process that imported them, as the
test suite runs the command, its server is a fork of it: `warm`), each cell's own server its
workers. A cell's server is a fork of the cell itself, taken before the cell computes anything
(`warm`): the cell has the preloaded modules already, so its server has nothing to import (a fresh
one spent ~3.5 CPU seconds, and its workers waited for it). A forked process starts as a fresh one
would at its target (a new process, no threads, nothing computed), with those modules already in
memory. Its start-up (docs/metrics.md) is measured from its fork, as a process started with a warm
module cache would be.

A process that holds a CUDA device is forked the same way: its device is in its environment
(CUDA_VISIBLE_DEVICES, engines/launch.py start_env), which a forked process would inherit from its
server rather than from its parent, so it is handed to the process and laid over its environment
first thing, before anything in it touches CUDA (engines/hosts.py `_serve`). That is safe only while
no process a server is forked from has initialised CUDA: the driver asks how many devices there are
through NVML (core/devices/device.py `cuda_count`), never CUDA itself, and `rlbench run`'s server is
a fresh interpreter (or a fork of a process that has only imported the preload list). On the first
GPU runs a spawned worker spent 13-19 s importing torch and transformers before it did anything. A
process that holds an Ascend NPU is spawned (torch_npu has not run in a forked process).
`RLBENCH_START=spawn` makes every process spawn (to compare the two).

The servers belong to the run: a cell's server is in the cell's process group and ends with the
cell; `rlbench run`'s ends with it. Each server asks the kernel to kill it when its client dies (the
parent-death signal: `_fork_server`, and server_guard.py first in a fresh server's preload list),
however many copies of the client's life line are still open in processes it forked that have not
yet let go of it. A forked process's parent is its server, so the parent-death signal
(core/devices/procs.py) reaches it when the server ends, which it does when its client ends: each
forked process lets go of the server's life line it inherits (`detach`), or a server would outlive
its client as long as any process it forked lives, and those processes would never learn of the
death.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
from multiprocessing import connection, forkserver, resource_tracker

from rlbench.core.devices import procs
from rlbench.core.errors import UserError

ENV = "RLBENCH_START"
# What every cell process and worker imports first; each module is imported once per server. The
# first makes a fresh server die with its client (server_guard.py); the last builds the config
# models' validators there (core/validators.py), not in each forked process.
PRELOAD = ("rlbench.core.devices.server_guard", "torch", "transformers.modeling_utils",
           "rlbench.run.processes",
           "rlbench.run.cell", "rlbench.engines.factory", "rlbench.engines.hosts",
           "rlbench.engines.rollout.worker",
           "rlbench.engines.trainer.ranks", "rlbench.core.validators")


def method(forkable: bool) -> str:
    """'forkserver' when no process to start holds an Ascend NPU (forkable) and RLBENCH_START does
    not say 'spawn', else 'spawn'."""
    choice = os.environ.get(ENV, "")
    if choice not in ("", "spawn", "forkserver"):
        raise UserError(f"{ENV}={choice!r}: allowed are 'spawn' and 'forkserver' (the default)")
    return "forkserver" if forkable and choice != "spawn" else "spawn"


def context(forkable: bool, tensors: bool = False):
    """The multiprocessing context to create processes with; tensors: torch's (a tensor handed to
    the process is shared, not copied). The fork server starts on the first process created, or at
    `warm`."""
    if tensors:
        # inside: instant path: `rlbench report` imports this module
        import torch.multiprocessing as mp
    else:
        mp = multiprocessing
    ctx = mp.get_context(method(forkable))
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def warm(forkable: bool) -> None:
    """Start the fork server now rather than when the first process is created. A process that has
    the preloaded modules already (a cell process, forked from `rlbench run`'s server) and no thread
    besides its own forks it from itself: the server is ready at once, with nothing to import.
    Otherwise (`rlbench run` itself) Python starts a fresh interpreter that imports them, beside
    this process's own work."""
    if context(forkable).get_start_method() != "forkserver":
        return

    if all(m in sys.modules for m
           in PRELOAD) and threading.active_count() == 1 and server_pid() is None:
        _fork_server()
    else:
        forkserver.ensure_running()


def _fork_server() -> None:
    """Python's fork server (its `main`, the same protocol), started as a fork of this process
    instead of a fresh interpreter: a copy of a process that has imported the preload list and
    computed nothing (no thread, no thread pool started), so what it forks starts as one of a fresh
    server would. Its signal handlers are a new interpreter's (the processes it forks inherit them);
    it ends when this process does (the end of its life line, as a spawned server)."""
    resource_tracker.ensure_running()  # its descriptor is handed on to what the server forks
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the server
        code = 1
        try:
            # ends with its client, whoever holds the life line (server_guard)
            procs.die_with_parent(signal.SIGKILL)
            os.close(alive_w)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            forkserver.main(listener.fileno(), alive_r, [])
        except SystemExit as e:  # its life line ended: the client is gone
            code = e.code if isinstance(e.code, int) else 0
        finally:
            os._exit(code)
    os.close(alive_r)
    listener.close()
    server = forkserver._forkserver  # noqa: SLF001 - what ensure_running would have set
    server._forkserver_address, server._forkserver_alive_fd = address, alive_w  # noqa: SLF001
    server._forkserver_pid = pid  # noqa: SLF001


def detach() -> None:
    """First thing in a process forked by a fork server: close the client's life line to that
    server, which Python hands on so that the process could ask the same server for processes of its
    own (rlbench's start their own). Without it the server would live as long as this process, and
    this process, whose parent is the server, would never get its parent-death signal. A no-op
    elsewhere."""
    server = forkserver._forkserver  # noqa: SLF001 - the life line has no public handle
    if server._forkserver_pid is None and server._forkserver_alive_fd is not None:  # noqa: SLF001
        os.close(server._forkserver_alive_fd)  # noqa: SLF001
        server._forkserver_alive_fd = None  # noqa: SLF001


def server_pid() -> int | None:
    """The pid of this process's fork server, None when it has none."""
    # no public accessor
    return getattr(forkserver._forkserver, "_forkserver_pid", None)  # noqa: SLF001
