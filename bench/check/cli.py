"""`rlbench check` and `rlbench history`: the regression gate's commands, registered on the app by
bench/cli.py. Like every command, each loads what it runs when it runs (the gate's statistics load
scipy), so that `rlbench --help` stays instant."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer


def check_cmd(
    run_dirs: Optional[list[Path]] = typer.Argument(None,
                                                    help="A run or ablation folder to judge "
                                                         "against "
                                                    "--baseline; an A/B folder to judge again; "
                                                    "several with --update or --calibrate. None: "
                                                    "an A/B run (--against)."),
    against: str = typer.Option("accepted", "--against",
                                help="A/B: run this commit or ref and this tree "
                                "interleaved on this machine and judge new / old ('accepted': the "
                                "commit in bench/baselines/ACCEPTED). Used when no RUN_DIRS and no "
                                "--baseline are given."),
    config: Optional[Path] = typer.Option(None, "--config", "-c",
                                          help="A/B: the workload, run by both trees "
                                          "(default: this tree's configs/ci-ab.yaml)."),
    ablation: str = typer.Option("ci", "--ablation", "-a", help="A/B: the cells both trees run."),
    set_: list[str] = typer.Option([], "--set", "-s", help="A/B: config overrides for both trees."),
    out: Path = typer.Option(Path("runs"), "--out", "-o",
                             help="A/B: folder that receives the A/B folder."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", "-b",
                                            help="Baseline JSON (e.g. "
                                                 "bench/baselines/cpu-default.json): for a machine "
                                                 "that can run only one tree (a GPU runner)."),
    update: bool = typer.Option(False, "--update",
                                help="Write BASELINE from RUN_DIRS instead of checking against "
                                "it; several runs calibrate its noise (value, standard error, "
                                "inflation)."),
    calibrate: bool = typer.Option(False, "--calibrate",
                                   help="Sensitivity study on RUN_DIRS (unchanged runs, "
                                   "or unchanged A/B folders): false-alarm rate and detection of "
                                   "planted 5, 10 and 20 percent slowdowns per component; prints a "
                                   "Markdown table."),
    tolerance: list[str] = typer.Option([], "--tolerance", "-t",
                                        help="With --update: KIND_OR_METRIC=FRACTION, e.g. "
                                             "ratio=0.1 (default: keep the file's tolerances, else "
                                             "the built-in defaults)."),
    confirm: bool = typer.Option(True, "--confirm/--no-confirm",
                                 help="A/B: when the only failures are "
                                 "paired performance metrics, run a second A/B with fresh "
                                 "processes and fail only on what both runs flag (per-process "
                                 "offsets differ between runs; a change of code does not). Two A/B "
                                 "folders as RUN_DIRS are judged this way."),
    record: Optional[Path] = typer.Option(None, "--record",
                                          help="A/B: append the result to this history file "
                                          "(JSON lines; created if missing; e.g. "
                                          "bench/baselines/history.jsonl) when it passes, then "
                                          "fail on a drift: a change point of a metric's chained "
                                          "series among the last --drift-steps steps, confirmed by "
                                          "an A/B against the anchor or beyond the noise of all "
                                          "metrics together (one short of that is suspected: the "
                                          "anchor A/B is due). `--against anchor` runs the "
                                          "history's anchor commit instead (recorded whatever its "
                                          "verdict)."),
    drift_steps: Optional[int] = typer.Option(None, "--drift-steps", min=1,
                                              help="With --record: a drift starting "
                                              "at any of this many last steps is judged (default "
                                              "8)."),
    anchor_every: int = typer.Option(0, "--anchor-every", min=0,
                                     help="With --record: make an A/B against the "
                                     "anchor commit every K steps, and whenever a change point is "
                                     "suspected, to confirm it in one run (0: never by itself; "
                                     "`--against anchor` any time)."),
    reanchor: bool = typer.Option(False, "--reanchor",
                                  help="With --record: this step is a move of ACCEPTED "
                                  "that changes performance on purpose: recorded whatever its "
                                  "verdict, and every metric's series starts anew at its new "
                                  "commit."),
    env_a: Optional[str] = typer.Option(
        None, "--env-a", help="A/B of two environments: the Python of the old one (a venv's, or "
        "a wrapper script; rlbench installed there), run interleaved with --env-b on this machine "
        "and judged B / A as a commit A/B is; each side's packages are recorded, the ones that "
        "differ named."),
    env_b: Optional[str] = typer.Option(
        None, "--env-b", help="The Python of the new environment (default: the one running this "
        "command)."),
    set_b: list[str] = typer.Option(
        [], "--set-b", help="A config override for B only (repeatable), e.g. --set-b "
        "rollout.max_num_seqs=32: a config A/B, or one beside --env-a/--env-b."),
    engine: str = typer.Option(
        "rlbench", "--engine", "-e", help="With --env-a/--env-b/--set-b: the cells both sides "
        "run: rlbench's (--ablation), or a peer framework's cell (trl, verl), with its own stage "
        "times."),
) -> None:
    """Performance regressions: exit 1 on a regression, 2 on bad input. With no RUN_DIRS, an A/B run
    of the accepted commit against this tree on this machine (CI's way), or of two environments
    (--env-a, --env-b) or configs (--set-b) on this tree; with --baseline, a run against a stored
    baseline."""
    # inside: the gate's statistics load scipy (about 2 s), which `rlbench --help` and the other
    # commands need not
    from rlbench.check.command import check
    from rlbench.check.drift import LAST_N
    from rlbench.check.env_ab import Sides
    from rlbench.check.record import Recording

    recording = Recording(record, drift_steps or LAST_N, anchor_every, reanchor) if record else None
    two = env_a or env_b or set_b or engine != "rlbench"
    sides = Sides(env_a, env_b, set_b, engine) if two else None
    code = check(run_dirs or [], against, config, ablation, set_, out, baseline, update, calibrate,
                 tolerance,
                 confirm, recording, sides)
    if code:
        sys.exit(code)  # not typer.Exit: main() runs the app with standalone_mode=False


def history_cmd(
    file: Path = typer.Argument(Path("bench/baselines/history.jsonl"),
                                help="A history file written by "
                                "`rlbench check --record`."),
    html: Optional[Path] = typer.Option(None, "--html",
                                        help="Also write the history page here: each "
                                        "metric's series relative to the anchor, change points "
                                        "marked, the A/Bs against the anchor."),
    drift_steps: Optional[int] = typer.Option(None, "--drift-steps", min=1,
                                              help="As `rlbench check "
                                              "--drift-steps`: a drift starting at any of this "
                                              "many last steps is judged (default 8)."),
) -> None:
    """The accepted A/B results over time. First the answer, one line per workload: unchanged since
    its anchor, a drift suspected (metric, size, since which commit), or a regression; then the
    detail: the chain (anchor, re-anchorings, steps left out), Otava's change points, the A/Bs
    against the anchor and whether one is due. Exit 1 on a confirmed regression (as `rlbench check
    --record` would fail), 2 on a corrupt or foreign file."""
    # inside: the history's drift rule loads scipy through the gate's statistics (about 2 s)
    from rlbench.check.drift import LAST_N
    from rlbench.check.history_command import history_command

    code = history_command(file, html, drift_steps or LAST_N)
    if code:
        sys.exit(code)
