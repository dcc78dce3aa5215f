"""What `rlbench check` does with its options (the command's options live in rlbench.cli): an A/B run
of the accepted commit against this tree, a run folder against a stored baseline, writing a baseline,
or a sensitivity study. -> the exit code (1: a regression)."""
from __future__ import annotations

from pathlib import Path

import typer
from rlbench.errors import UserError


def check(run_dirs: list[Path], against: str, config: Path | None, ablation: str, sets: list[str], out: Path,
          baseline: Path | None, update: bool, calibrate: bool, tolerance: list[str]) -> int:
    from rlbench.check import against as ab
    from rlbench.check.verdicts import check as do_check
    from rlbench.check.verdicts import format_check, parse_tolerances, write_baseline

    if calibrate:
        if run_dirs and all(ab.is_ab(d) for d in run_dirs):
            from rlbench.check.ab_power import format_study, study
        else:
            from rlbench.check.calibrate import format_study, study
        typer.echo(format_study(study(run_dirs)))
        return 0
    if not run_dirs and baseline is None:
        result = ab.judge(ab.run_ab(against, config, ablation, sets, out, echo=lambda m: typer.echo(m, err=True)))
    elif len(run_dirs) == 1 and ab.is_ab(run_dirs[0]) and baseline is None:
        result = ab.judge(run_dirs[0])
    elif baseline is None:
        raise UserError("--baseline FILE is required to judge a run folder (or give no RUN_DIRS for an A/B "
                        "run against --against REF)")
    elif update:
        path = write_baseline(run_dirs, baseline, parse_tolerances(tolerance))
        typer.echo(f"baseline written: {path} (from {len(run_dirs)} run(s))")
        return 0
    elif len(run_dirs) != 1:
        raise UserError(f"check compares one run with the baseline, got {len(run_dirs)} (several runs: "
                        "--update or --calibrate)")
    else:
        result = do_check(run_dirs[0], baseline)
    typer.echo(format_check(result))
    return result.exit_code
