"""Run by tests/test_starting.py in a fresh interpreter: start one process with the context a CPU run uses
(bench/core/devices/starting.py) and print what it found at its start, as JSON."""
import json
import os
import sys


def probe(out) -> None:
    from multiprocessing import forkserver

    from rlbench.core.devices import starting

    preloaded = "transformers.modeling_utils" in sys.modules  # before anything here imported it
    inherited = forkserver._forkserver._forkserver_alive_fd is not None
    starting.detach()
    out.put({"ppid": os.getppid(), "preloaded": preloaded, "inherited_line": inherited,
             "line_after_detach": forkserver._forkserver._forkserver_alive_fd})


if __name__ == "__main__":
    from rlbench.core.devices import starting

    ctx = starting.context(cpu_only=True)
    q = ctx.Queue()
    p = ctx.Process(target=probe, args=(q,))
    p.start()
    found = q.get(timeout=120)
    p.join(30)
    print(json.dumps({**found, "client": os.getpid(), "server": starting.server_pid(),
                      "method": ctx.get_start_method(), "exitcode": p.exitcode}))
