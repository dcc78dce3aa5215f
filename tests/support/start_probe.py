"""Run by tests/unit/core/test_starting.py in a fresh interpreter: start one process with the context a CPU run uses
(core/devices/starting.py) and print what it found at its start, as JSON."""
import json
import os
import sys


def starting_parent(pid: int) -> int | None:
    from rlbench.core.devices import procs

    return procs.parent_pid(pid)


def probe(out) -> None:
    from multiprocessing import forkserver

    from rlbench.core.devices import starting

    preloaded = "transformers.modeling_utils" in sys.modules  # before anything here imported it
    inherited = forkserver._forkserver._forkserver_alive_fd is not None
    starting.detach()
    out.put({"ppid": os.getppid(), "preloaded": preloaded, "inherited_line": inherited,
             "line_after_detach": forkserver._forkserver._forkserver_alive_fd})


def cmdline(pid) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except (OSError, TypeError):
        return None


if __name__ == "__main__":
    import importlib

    from rlbench.core.devices import starting

    if "--as-cell" in sys.argv:  # as a cell process: the preload list imported, then the server warmed
        for name in starting.PRELOAD:
            importlib.import_module(name)
        starting.warm(forkable=True)
    ctx = starting.context(forkable=True)
    q = ctx.Queue()
    p = ctx.Process(target=probe, args=(q,))
    p.start()
    found = q.get(timeout=120)
    p.join(30)
    server = starting.server_pid()
    print(json.dumps({**found, "client": os.getpid(), "server": server, "method": ctx.get_start_method(),
                      "exitcode": p.exitcode, "server_ppid": None if server is None else starting_parent(server),
                      "server_is_a_fork": cmdline(server) == cmdline(os.getpid())}))


class EnvReporter:
    """A worker (engines/hosts.py ProcessHost) that answers with the value of an environment variable."""

    def __init__(self, slot, emit):
        pass

    def env(self, name: str) -> str | None:
        return os.environ.get(name)
