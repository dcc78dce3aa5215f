"""What `rlbench check` does with its options (the command's options live in rlbench.cli): an A/B
run of the accepted commit against this tree (or of two environments or configs:
bench/check/env_ab.py), a run folder against a stored baseline, writing a baseline, or a sensitivity
study; with --record, the passing A/B appended to a history and the drift over it judged
(bench/check/record.py). -> the exit code (1: a regression, or a drift)."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from rlbench.check import ab_power
from rlbench.check import against as ab
from rlbench.check import calibrate as calibration
from rlbench.check import env_ab
from rlbench.check.env_ab import Sides
from rlbench.check.confirm import combine, format_confirmed, needs_confirmation
from rlbench.check.record import Recording, anchor_ref, record_and_judge
from rlbench.check.verdicts import check as do_check
from rlbench.check.verdicts import format_check, parse_tolerances, write_baseline
from rlbench.core.errors import UserError


def check(run_dirs: list[Path], against: str, config: Path | None, ablation: str, sets: list[str],
          out: Path,
          baseline: Path | None, update: bool, calibrate: bool, tolerance: list[str],
          confirm: bool = True,
          recording: Recording | None = None, sides: Sides | None = None) -> int:
    """sides: an A/B of two environments or configs (--env-a, --env-b, --set-b, --engine), else
    None."""
    if calibrate:
        power = ab_power if run_dirs and all(ab.is_ab(d) for d in run_dirs) else calibration
        typer.echo(power.format_study(power.study(run_dirs)))
        return 0
    if recording is not None and (baseline is not None or update or len(run_dirs) > 2
                                  or not all(ab.is_ab(d) for d in run_dirs)):
        raise UserError("--record FILE records A/B runs only: give no RUN_DIRS (an A/B run), or "
                        "A/B folders")
    if sides is not None and (run_dirs or baseline is not None):
        raise UserError("--env-a, --env-b, --set-b and --engine run a new A/B: give no RUN_DIRS "
                        "and no --baseline")
    if not run_dirs and baseline is None:
        one_run = _runner(against, config, ablation, sets, out, recording, sides)
        return _ab(one_run, confirm, recording)
    if len(run_dirs) == 1 and ab.is_ab(run_dirs[0]) and baseline is None:
        result = ab.judge(run_dirs[0])
        typer.echo(format_check(result))
        return _recorded(recording, run_dirs[0], result, None, result.exit_code)
    if len(run_dirs) == 2 and all(ab.is_ab(d) for d
                                  in run_dirs) and baseline is None and not update:
        final = _confirmed(*run_dirs)
        return _recorded(recording, run_dirs[0], final, run_dirs[1], final.exit_code)
    if baseline is None:
        raise UserError("--baseline FILE is required to judge a run folder (or give no RUN_DIRS "
                        "for an A/B run against --against REF)")
    if update:
        path = write_baseline(run_dirs, baseline, parse_tolerances(tolerance))
        typer.echo(f"baseline written: {path} (from {len(run_dirs)} run(s))")
        return 0
    if len(run_dirs) != 1:
        raise UserError(f"check compares one run with the baseline, got {len(run_dirs)} (several "
                        "runs: --update or --calibrate)")
    result = do_check(run_dirs[0], baseline)
    typer.echo(format_check(result))
    return result.exit_code


def _runner(against: str, config, ablation: str, sets: list[str], out: Path,
            recording: Recording | None, sides: Sides | None):
    """-> one_run(ref) that makes one A/B folder: of REF's tree against this one (`--against`), or
    of two environments or configs (sides; REF unused: each run is the same A/B again)."""
    def echo(m):
        typer.echo(m, err=True)

    if sides is None:
        ref = against
        if against == "anchor":
            ref = f"anchor:{anchor_ref(recording, config, ablation, sets)}"
        return lambda name=ref: ab.run_ab(name, config, ablation, sets, out, echo=echo)
    if sides.mode is None:
        raise UserError(f"--engine {sides.engine}: an A/B of two environments or configs only "
                        "(--env-a, --env-b, --set-b); a commit A/B (--against) runs rlbench's "
                        "cells of --ablation")
    if against != "accepted":
        raise UserError(f"--against {against} with --env-a/--env-b/--set-b: one A/B at a time, of "
                        "two commits (--against) or of two environments or configs on this tree")
    if recording is not None and recording.anchor_every:
        raise UserError("--anchor-every: an A/B against the history's anchor commit, which an A/B "
                        "of environments or configs has none of")
    return lambda name=None: env_ab.run_env_ab(sides, config, ablation, sets, out, echo=echo)


def _ab(one_run, confirm: bool, recording: Recording | None) -> int:
    """An A/B run (and its confirming run where the first flags paired metrics only); with a
    recording, the passing result appended to the history and the drift judged. one_run() -> a new
    A/B folder."""
    first_dir = one_run()
    result = ab.judge(first_dir)
    if confirm and needs_confirmation(result):
        typer.echo(f"rlbench check: flagged "
                   f"{', '.join(r.metric for r in result.rows if r.mark == 'worse')}; "
                   "a second A/B run with fresh processes decides (--no-confirm: fail now)",
                   err=True)
        second = one_run()
        final = _confirmed(first_dir, second, result)
        return _recorded(recording, first_dir, final, second, final.exit_code, one_run)
    typer.echo(format_check(result))
    return _recorded(recording, first_dir, result, None, result.exit_code, one_run)


def _recorded(recording: Recording | None, ab_dir: Path, result, confirmed_by: Path | None,
              code: int,
              one_run=None) -> int:
    """The exit code once the result is recorded and the drift judged (no recording: the code as it
    was)."""
    if recording is None:
        return code
    return record_and_judge(recording, ab_dir, result, confirmed_by, one_run,
                            echo=typer.echo) or code


def _confirmed(first_dir: Path, second_dir: Path, first=None):
    """Judge two A/B folders as a run and its confirmation (first: the first's judgement, when made
    already); the combined verdict goes into both ab.json files. -> the combined CheckResult."""
    first, second = first or ab.judge(first_dir), ab.judge(second_dir, confirming=True)
    final = combine(first, second)
    # what moved in both runs
    ab.annotate(json.loads((Path(first_dir) / ab.AB_FILE).read_text()), final)
    ab.record_confirmation(first_dir, second_dir, final)
    typer.echo(format_confirmed(first, second, final))
    return final
