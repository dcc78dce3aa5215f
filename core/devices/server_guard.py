"""The first module a fresh fork server imports (starting.PRELOAD): there it asks the kernel to kill
the server when its client dies (procs.die_with_parent). A server otherwise ends only when every
copy of its client's life line is closed; a process it forked holds one until it lets go of it
(starting.detach), so a client killed while such a process was still starting (a loaded machine:
seconds) left the server, and everything it forked, alive after it. Imported anywhere else (a
process that preloads the same modules, or one forked from a server with them already in memory), it
does nothing."""
from __future__ import annotations

import signal
import sys

from rlbench.core.devices import procs


def _in_fork_server() -> bool:
    """Whether this import runs inside multiprocessing's fork server's main (its preloading)."""
    frame = sys._getframe(1)
    while frame is not None:
        if (
            frame.f_code.co_name == "main"
            and frame.f_globals.get("__name__") == "multiprocessing.forkserver"
        ):
            return True
        frame = frame.f_back
    return False


if _in_fork_server():
    procs.die_with_parent(signal.SIGKILL)
