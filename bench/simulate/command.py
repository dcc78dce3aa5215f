"""The `rlbench simulate` command function (registered on rlbench.cli's Typer app). The simulator is pure
Python (its plots' matplotlib and the validation's analysis load when used), so importing it costs little.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rlbench.simulate import format_text, parse_list, run_simulation


def simulate(
    run_dir: Optional[Path] = typer.Argument(None, help="A run or ablation folder with a sync cell to calibrate "
                                                         "from (and to validate against)."),
    preset: Optional[str] = typer.Option(None, "--preset", "-p",
                                         help="Simulate a preset setting instead: paper-7b (7B, GSM8K-like "
                                              "lengths, the paper's figures beside)."),
    devices: Optional[str] = typer.Option(None, "--devices", "-d",
                                          help="Device counts to sweep, comma-separated (default 8,16,32,64)."),
    rollout_share: Optional[str] = typer.Option(None, "--rollout-share", "-r",
                                                help="Rollout pool shares to sweep, each in (0, 1) "
                                                     "(default 0.25,0.5,0.75)."),
    staleness: int = typer.Option(1, "--staleness", "-k", min=0, help="k of bounded_async."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Output folder (default RUN_DIR/simulate or runs/simulate-PRESET)."),
) -> None:
    """Predict sync / periodic-async / bounded-async TPSPD and speedups on N rollout + M training devices,
    every device at the per-device costs measured in a run's data-parallel sync cell (the report's
    measured-vs-predicted model, nothing fitted) or stated by a preset; writes simulate.json and plots."""
    result = run_simulation(run_dir, preset, parse_list(devices, int, "--devices"),
                            parse_list(rollout_share, float, "--rollout-share"), out, staleness)
    typer.echo(format_text(result))
