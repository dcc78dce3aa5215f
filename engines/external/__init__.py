"""External baselines: drive the real peer frameworks and read their metrics into rlbench's schema.

runner("verl")          verl/adapter.py run_verl: `rlbench run --engine verl` and the VERL cells of
                        `--ablation verl` (VERL's venv: scripts/setup.sh --verl; CPU or GPU)
runner("trl")           trl/adapter.py run_trl: `--engine trl` and the TRL cells of `--ablation
                        peers`
runner("mindspeed-rl")  mindspeed.py run_mindspeed: `--engine mindspeed-rl` (Ascend NPU,
                        MINDSPEED_RL_HOME)
Each raises rlbench.core.errors.UserError when the framework is absent, and writes
out_dir/results.json in the same layout as an rlbench cell.
"""
from __future__ import annotations

from typing import Callable

FRAMEWORKS = ("verl", "mindspeed-rl", "trl")  # what `--engine` takes besides rlbench


def runner(framework: str) -> Callable:
    """The framework's runner, (cfg, out_dir, **options) -> its results; only its own adapter is
    imported."""
    if framework == "verl":
        # inside: each adapter imports its framework's dependencies (VERL's venv, TRL, torch) when
        # chosen
        from rlbench.engines.external.verl.adapter import run_verl
        return run_verl
    if framework == "trl":
        # inside: as above
        from rlbench.engines.external.trl.adapter import run_trl
        return run_trl
    if framework == "mindspeed-rl":
        # inside: as above
        from rlbench.engines.external.mindspeed import run_mindspeed
        return run_mindspeed
    raise KeyError(f"{framework!r}: not one of {', '.join(FRAMEWORKS)}")
