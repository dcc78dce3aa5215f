"""What `rlbench check` does with its options (the command's options live in rlbench.cli): an A/B run
of the accepted commit against this tree, a run folder against a stored baseline, writing a baseline,
or a sensitivity study. -> the exit code (1: a regression)."""
from __future__ import annotations

from pathlib import Path

import typer
from rlbench.check.confirm import combine, format_confirmed, needs_confirmation
from rlbench.core.errors import UserError


def check(run_dirs: list[Path], against: str, config: Path | None, ablation: str, sets: list[str], out: Path,
          baseline: Path | None, update: bool, calibrate: bool, tolerance: list[str], confirm: bool = True) -> int:
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
        def one_run():
            return ab.run_ab(against, config, ablation, sets, out, echo=lambda m: typer.echo(m, err=True))

        first_dir = one_run()
        result = ab.judge(first_dir)
        if confirm and needs_confirmation(result):
            typer.echo(f"rlbench check: flagged {', '.join(r.metric for r in result.rows if r.mark == 'worse')}; "
                       "a second A/B run with fresh processes decides (--no-confirm: fail now)", err=True)
            return _confirmed(first_dir, one_run(), result)
    elif len(run_dirs) == 1 and ab.is_ab(run_dirs[0]) and baseline is None:
        result = ab.judge(run_dirs[0])
    elif len(run_dirs) == 2 and all(ab.is_ab(d) for d in run_dirs) and baseline is None and not update:
        return _confirmed(*run_dirs)
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


def _confirmed(first_dir: Path, second_dir: Path, first=None) -> int:
    """Judge two A/B folders as a run and its confirmation (first: the first's judgement, when made already);
    the combined verdict goes into both ab.json files."""
    from rlbench.check import against as ab

    first, second = first or ab.judge(first_dir), ab.judge(second_dir, confirming=True)
    final = combine(first, second)
    ab.record_confirmation(first_dir, second_dir, final)
    typer.echo(format_confirmed(first, second, final))
    return final.exit_code
