"""Running `--ablation peers`' peer framework cells (the cells: cells.py, their table: analysis.py):
a refusal before any cell runs, and a framework's runner in the cell's process (RUNNER, what the
record names)."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from rlbench.core.experiments.spec import Runner
from rlbench.engines import external
from rlbench.experiments.peers.cells import framework_of, framework_options



def preflight(cells) -> None:
    """Before any cell runs: every peer framework cell's framework is installed and accepts its
    config (UserError, exit 2, otherwise)."""
    for name, cfg in cells:
        if framework_of(name) == "trl":
            # inside: torch and transformers; every `rlbench run` calls this, most without a TRL
            # cell
            from rlbench.engines.external.trl import adapter, settings

            adapter.require_trl()
            settings.check(cfg, cfg.engine.num_devices)
        elif framework_of(name) == "verl":
            # inside: VERL's venv is found and its versions read only where a VERL cell runs
            from rlbench.engines.external.verl import adapter as verl_adapter

            verl_adapter.preflight(cfg, framework_options(name))


def run_framework_cell(framework: str, cfg, folder: Path, name: str, progress, pacer) -> dict:
    """A peer framework's cell, in this (the cell's) process."""
    return external.runner(framework)(cfg, folder, name=name, pacer=pacer, progress=progress,
                                      options=framework_options(name))


def runner_of(cell: str):
    """The function that runs ablation cell `cell` in its process, called as f(cfg, folder, name,
    progress, pacer): its framework's, or None for rlbench's own cells."""
    framework = framework_of(cell)
    return partial(run_framework_cell, framework) if framework else None


RUNNER = Runner(preflight=preflight, runner_of=runner_of)
