"""Test hooks that break a worker on purpose, read from the environment (off unless set)."""
from __future__ import annotations

import os
import sys
import time

ENV = "RLBENCH_FAULT"


def at(iteration: int, role: str = "rollout") -> None:
    """RLBENCH_FAULT=<role>_exit:K makes such a worker (role: rollout, trainer, vllm_engine) die at
    iteration K (a crash, no goodbye); <role>_hang:K makes it hang there instead (alive, no
    progress: what the hang watchdog must catch)."""
    spec = os.environ.get("RLBENCH_FAULT", "")
    kind, _, at_k = spec.partition(":")
    if kind not in (f"{role}_exit", f"{role}_hang") or not at_k or int(at_k) != iteration:
        return  # another worker's fault, or another kind (clock_skew, misplace)
    if kind == f"{role}_exit":
        os._exit(17)
    if kind == f"{role}_hang":
        # when the hang began (epoch seconds), for scripts/soak.py's watchdog detection time
        print(f"rlbench fault: {kind} at iteration {iteration}, hung from t={time.time():.3f}",
              file=sys.stderr, flush=True)
        while True:  # a stuck generation or collective: the process lives on, nothing moves
            time.sleep(3600)


def misplace(worker: str) -> None:
    """RLBENCH_FAULT=misplace:<worker> gives that worker one intra-op thread more than its plan,
    after it was pinned: what the placement check (engines/launch.py) must catch."""
    if os.environ.get("RLBENCH_FAULT", "") == f"misplace:{worker}":
        import torch  # inside: `rlbench --help` imports this package (the run's planted slowdowns)

        torch.set_num_threads(torch.get_num_threads() + 1)


def clock_skew(resources: list[str], clock) -> None:
    """RLBENCH_FAULT=clock_skew:<resource>:<seconds> sets the clock of every Ray actor on a node
    holding that resource <seconds> ahead (negative: behind) of the machine's, as another machine's
    clock would be: what the clock mapping (engines/ray_clock.py) must find and take out. clock: the
    process's node clock (core/record/stages.py NODE_CLOCK)."""
    kind, _, rest = os.environ.get("RLBENCH_FAULT", "").partition(":")
    resource, _, seconds = rest.rpartition(":")
    if kind == "clock_skew" and resource in resources:
        clock.skew = float(seconds)
