"""Test hooks, off unless their environment variable is set: planted faults (a worker dies or hangs)
and planted slowdowns (a stage made slower, to measure `rlbench check`), and a planted pause between
iterations. The measured code never imports them: they register at the core's hook points
(core/hooks.py), which loads `install` by name in a process whose environment asks for one."""
from __future__ import annotations

import os

from rlbench.planted import burn, faults


def install(register) -> None:
    """Register the planted slowdowns and faults this process's environment names."""
    if os.environ.get(burn.ACTIVE_ENV):
        register("stage_end", burn.plant)
        register("decode_step", lambda cpu: burn.plant("decode", 0.0, cpu))
    if os.environ.get(faults.ENV):
        register("iteration", faults.at)
        register("started", faults.misplace)
        register("node", faults.clock_skew)
