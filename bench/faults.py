"""Test hooks that break a worker on purpose, read from the environment (off unless set)."""
from __future__ import annotations

import os


def exit_at(iteration: int, role: str = "rollout") -> None:
    """RLBENCH_FAULT=<role>_exit:K (role: rollout, trainer, vllm_engine) makes such a worker die at
    iteration K (a crash, no goodbye)."""
    spec = os.environ.get("RLBENCH_FAULT", "")
    if spec.startswith(f"{role}_exit:") and int(spec.split(":")[1]) == iteration:
        os._exit(17)
