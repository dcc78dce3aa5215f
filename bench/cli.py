"""rlbench command line. Heavy imports (torch, transformers) happen inside the commands that need them,
so `rlbench --help`, `report`, `compare` and `check` are instant.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rlbench.errors import UserError, WorkerError

app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                  help="Benchmark synchronous vs periodic-asynchronous RL post-training (TPSPD, accuracy).")


def ablation_help() -> str:
    """`--ablation`'s help, made from the ablation registry (bench/ablation.py)."""
    from rlbench.ablation import help_text

    return help_text()


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


@app.command()
def run(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML overrides (default: configs/cpu-default.yaml)."),
    ablation: Optional[str] = typer.Option(None, "--ablation", "-a",
                                           help=ablation_help()),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key, e.g. --set train.lr=1e-4."),
    engine: str = typer.Option("rlbench", "--engine", "-e",
                               help="rlbench (this harness's engines), verl or mindspeed-rl (the real peer "
                                    "framework, where installed with its hardware)."),
    out: Path = typer.Option(Path("runs"), "--out", "-o", help="Folder that receives the run folder."),
    report: bool = typer.Option(True, "--report/--no-report", help="Write tables, plots and report.html at the end."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
    profile: bool = typer.Option(False, "--profile", help="Record torch.profiler traces per worker "
                                 "(run.profile_iterations after warm-up) into <cell>/traces for TensorBoard/Perfetto."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Run every cell once per seed, e.g. 0,1,2 (sets "
                                        "run.seed); the report aggregates each cell over its seeds."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Finish the run in RUN_DIR: its completed cells "
                                          "are kept (after checking they match its config and this code), the "
                                          "others run again from their start; the config, ablation and seeds are "
                                          "the run's own."),
) -> None:
    """Run the benchmark: each cell in its own process, then print the table and write the report."""
    from rlbench import procs

    procs.mark_run()  # every process of this run carries the token: found and ended at the end
    try:
        if resume is not None:
            _resume(resume, progress, report, refused={"--config": config, "--set": set_, "--ablation": ablation,
                                                       "--seeds": seeds, "--engine": engine != "rlbench",
                                                       "--profile": profile})
        else:
            _run_new(config, ablation or "async", set_, engine, out, report, progress, profile, seeds)
    finally:
        _sweep()


def _run_new(config, ablation: str, set_: list[str], engine: str, out: Path, report: bool, progress: bool,
             profile: bool, seeds: str | None) -> None:
    from rlbench.ablation import cells_for, new_run_dir, run_ablation
    from rlbench.config import load_config, parse_overrides
    from rlbench.seeds import parse_seeds

    sets = set_ + (["run.profile=true"] if profile else [])
    cfg, overrides = load_config(config, sets), parse_overrides(sets)
    seed_list = parse_seeds(seeds)
    if engine != "rlbench":
        if seed_list:
            raise UserError(f"--seeds {seeds}: only with --engine rlbench (run {engine} once per --set run.seed=N)")
        _run_external(engine, cfg, out, report)
        return
    cells_for(ablation, cfg, overrides)  # unknown ablation name or invalid cell -> exit 2 before anything runs
    from rlbench import slowdown
    slowdown.parse(os.environ.get(slowdown.ENV, ""))  # a malformed RLBENCH_SLOW -> exit 2, nothing run
    _preflight(cfg)
    run_dir = new_run_dir(out, cfg.run.name if ablation == "none" else f"{cfg.run.name}-{ablation}")
    typer.echo(f"rlbench: {ablation} on {config or 'configs/cpu-default.yaml'} -> {run_dir}", err=True)
    try:
        record = run_ablation(ablation, cfg, run_dir, progress=progress, seeds=seed_list, overrides=overrides)
    finally:
        _finish(run_dir, report)
    _raise_failed(record)


def _resume(run_dir: Path, progress: bool, report: bool, refused: dict) -> None:
    """`--resume RUN_DIR`: the run's own config, ablation and seeds; completed cells kept (bench/resume.py)."""
    from rlbench import provenance, resume
    from rlbench.ablation import run_cells

    given = [opt for opt, value in refused.items() if value]
    if given:
        raise UserError(f"--resume {run_dir} runs that run's own configuration (its ablation.json); leave out "
                        f"{', '.join(given)}")
    record, base, cells = resume.load(run_dir)
    digest = provenance.code_digest()
    resume.check_code(record, run_dir, digest)
    _preflight(base)
    kept = resume.plan(run_dir, record, cells, digest)
    typer.echo(f"rlbench: resuming {run_dir}: kept {len(kept)} completed cell(s) ({', '.join(kept) or 'none'}), "
               f"running {len(cells) - len(kept)}", err=True)
    try:
        record = run_cells(cells, record, run_dir, progress, base.run.interleave)
    finally:
        _finish(run_dir, report)
    _raise_failed(record)


def _raise_failed(record: dict) -> None:
    failed = [c for c in record["cells"] if c["exit_code"]]
    if failed:
        raise WorkerError(f"{len(failed)} cell(s) failed: " + ", ".join(f"{c['name']} (exit {c['exit_code']})"
                                                                        for c in failed))


def _sweep() -> None:
    """The last backstop: any process still carrying this run's token (bench/procs.py) outside the
    cells' process groups, which are ended as each cell ends, is ended here, except this process and its
    multiprocessing resource tracker (it ends with this process and cleans up after it)."""
    from multiprocessing import resource_tracker

    from rlbench import procs

    token = os.environ.get(procs.RUN_ENV)
    spare = (os.getpid(), getattr(resource_tracker._resource_tracker, "_pid", None) or -1)
    left = procs.kill_all(lambda: procs.marked(token, spare), timeout_s=10.0) if token else []
    if left:
        print(f"warning: processes of this run still alive: {procs.describe(left)}", file=sys.stderr)


def _run_external(engine: str, cfg, out: Path, report: bool) -> None:
    """One cell run by the real VERL / MindSpeed-RL, parsed into rlbench's result schema."""
    from rlbench.ablation import new_run_dir

    runners = {"verl": "rlbench.engines.external.verl:run_verl",
               "mindspeed-rl": "rlbench.engines.external.mindspeed:run_mindspeed"}
    if engine not in runners:
        raise UserError(f"--engine {engine!r}: allowed: rlbench, {', '.join(runners)}")
    import importlib

    mod, fn = runners[engine].split(":")
    run_dir = new_run_dir(out, f"{cfg.run.name}-{engine}")
    try:
        getattr(importlib.import_module(mod), fn)(cfg, run_dir)
    except UserError:
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing measured: no half-made run folder
        raise
    _finish(run_dir, report)


def _preflight(cfg) -> None:
    """Reject bad data, missing files and limits the run cannot fit (bench/limits.py: context length,
    memory) before any cell starts (exit code 2, no run folder)."""
    from rlbench import device as dev
    from rlbench import limits, placement
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import check_supported
    from rlbench.engines.model.loader import model_facts

    check_supported(cfg)
    dataset = load_dataset(cfg.data, cfg.run.seed)
    if cfg.model.kind == "hf" and not (Path(cfg.model.path) / "config.json").is_file():
        raise UserError(f"model.path={cfg.model.path}: not a Hugging Face model directory (no config.json)")
    kind = dev.resolve_kind(cfg.engine.device)
    if kind != "npu":  # (NPU: counted in the cell, where torch_npu is imported anyway)
        placement.plan(cfg.engine, kind, dev.available(kind))  # more devices than the machine has
    facts, tok = model_facts(cfg)
    prompt_max = max(len(tok.prompt_ids(dataset.prompt_text(p))) for p in dataset.train + dataset.eval + dataset.seen)
    limits.check(cfg, facts, prompt_max, kind, dev.memory_capacity(kind))


def _finish(run_dir: Path, report: bool) -> None:
    """Table and report from whatever was measured, also after a failure or Ctrl-C."""
    from rlbench import schema
    from rlbench.ladder import write_ladder
    from rlbench.reports import build_report, summary_table_text

    try:
        if not schema.load_run(run_dir):
            return
    except UserError:
        return
    write_ladder(run_dir)  # families.csv, which the table and the report show (a families ladder only)
    typer.echo(summary_table_text(run_dir))
    if report:
        path = build_report(run_dir)
        typer.echo(f"report: {path}")
    typer.echo(f"results: {run_dir}")


@app.command("report")
def report_cmd(run_dir: Path = typer.Argument(..., help="A run or ablation folder."),
               add: list[Path] = typer.Option([], "--add", help="Another run folder whose cells join this "
                                              "report (e.g. `--ablation regime-natural` beside a regime map); "
                                              "repeatable.")) -> None:
    """Write summary.csv/.md, plots and report.html into RUN_DIR."""
    from rlbench.ladder import write_ladder
    from rlbench.reports import build_report, summary_table_text

    write_ladder(run_dir)
    typer.echo(summary_table_text(run_dir, add))
    typer.echo(f"report: {build_report(run_dir, add)}")


@app.command()
def compare(run_a: Path = typer.Argument(...), run_b: Path = typer.Argument(...)) -> None:
    """Side-by-side table of two runs (or ablations) with B/A ratios."""
    from rlbench.reports import compare as do_compare

    _, text = do_compare(run_a, run_b)
    typer.echo(text)


@app.command("check")
def check_cmd(
    run_dirs: Optional[list[Path]] = typer.Argument(None, help="A run or ablation folder to judge against "
                                                    "--baseline; an A/B folder to judge again; several with "
                                                    "--update or --calibrate. None: an A/B run (--against)."),
    against: str = typer.Option("accepted", "--against", help="A/B: run this commit or ref and this tree "
                                "interleaved on this machine and judge new / old ('accepted': the commit in "
                                "bench/baselines/ACCEPTED). Used when no RUN_DIRS and no --baseline are given."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="A/B: the workload, run by both trees "
                                          "(default: this tree's configs/ci-ab.yaml)."),
    ablation: str = typer.Option("ci", "--ablation", "-a", help="A/B: the cells both trees run."),
    set_: list[str] = typer.Option([], "--set", "-s", help="A/B: config overrides for both trees."),
    out: Path = typer.Option(Path("runs"), "--out", "-o", help="A/B: folder that receives the A/B folder."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", "-b",
                                            help="Baseline JSON (e.g. bench/baselines/cpu-default.json): for a "
                                                 "machine that can run only one tree (a GPU runner)."),
    update: bool = typer.Option(False, "--update", help="Write BASELINE from RUN_DIRS instead of checking against "
                                "it; several runs calibrate its noise (value, standard error, inflation)."),
    calibrate: bool = typer.Option(False, "--calibrate", help="Sensitivity study on RUN_DIRS (unchanged runs, "
                                   "or unchanged A/B folders): false-alarm rate and detection of planted 5, 10 "
                                   "and 20 percent slowdowns per component; prints a Markdown table."),
    tolerance: list[str] = typer.Option([], "--tolerance", "-t",
                                        help="With --update: KIND_OR_METRIC=FRACTION, e.g. ratio=0.1 (default: "
                                             "keep the file's tolerances, else the built-in defaults)."),
) -> None:
    """Performance regressions: exit 1 on a regression, 2 on bad input. With no RUN_DIRS, an A/B run of the
    accepted commit against this tree on this machine (CI's way); with --baseline, a run against a stored
    baseline."""
    from rlbench import against as ab
    from rlbench.check import check as do_check
    from rlbench.check import format_check, parse_tolerances, write_baseline

    run_dirs = run_dirs or []
    if calibrate:
        if run_dirs and all(ab.is_ab(d) for d in run_dirs):
            from rlbench.check_ab_power import format_study, study
        else:
            from rlbench.check_calibrate import format_study, study
        typer.echo(format_study(study(run_dirs)))
        return
    if not run_dirs and baseline is None:
        result = ab.judge(ab.run_ab(against, config, ablation, set_, out, echo=lambda m: typer.echo(m, err=True)))
    elif len(run_dirs) == 1 and ab.is_ab(run_dirs[0]) and baseline is None:
        result = ab.judge(run_dirs[0])
    elif baseline is None:
        raise UserError("--baseline FILE is required to judge a run folder (or give no RUN_DIRS for an A/B "
                        "run against --against REF)")
    elif update:
        path = write_baseline(run_dirs, baseline, parse_tolerances(tolerance))
        typer.echo(f"baseline written: {path} (from {len(run_dirs)} run(s))")
        return
    elif len(run_dirs) != 1:
        raise UserError(f"check compares one run with the baseline, got {len(run_dirs)} (several runs: "
                        "--update or --calibrate)")
    else:
        result = do_check(run_dirs[0], baseline)
    typer.echo(format_check(result))
    if result.exit_code:
        sys.exit(result.exit_code)  # not typer.Exit: main() runs the app with standalone_mode=False


# The simulate command lives with the simulator (no torch: 0.15 s to import).
from rlbench.simulate.command import simulate as _simulate  # noqa: E402

app.command("simulate")(_simulate)


@app.command()
def env(remeasure: bool = typer.Option(False, "--remeasure", help="Measure the peak again (else cached)."),
        dtype: str = typer.Option("float32", "--dtype", help="dtype of the matmul probe: float32, bfloat16, "
                                  "float16.")) -> None:
    """What hardware and software rlbench sees, and one device's measured peak (matmul FLOP/s, copy
    bytes/s) that per-stage MFU and bandwidth utilisation are measured against."""
    import json

    from rlbench import device as dev
    from rlbench import peak, provenance

    device = dev.resolve("auto")
    info = provenance.collect(device)
    info["peak"] = peak.peak(device, dev.dtype(dtype, device), remeasure=remeasure)
    info["peak_cache"] = str(peak.cache_path())
    typer.echo(json.dumps(info, indent=1))


@app.command("config")
def config_cmd(
    config: Optional[Path] = typer.Option(None, "--config", "-c"),
    set_: list[str] = typer.Option([], "--set", "-s"),
    docs: bool = typer.Option(False, "--docs", help="List every key with its default and description."),
) -> None:
    """Print the resolved configuration (or, with --docs, every key documented)."""
    import yaml
    from rlbench.config import RunConfig, load_config

    if docs:
        for sec_name, sec in RunConfig.model_fields.items():
            for key, f in sec.annotation.model_fields.items():
                typer.echo(f"{sec_name}.{key} = {f.default!r}  # {f.description}")
        return
    typer.echo(yaml.safe_dump(load_config(config, set_).model_dump(mode="json"), sort_keys=False))


def main() -> None:
    try:
        code = app(standalone_mode=False)  # Ctrl-C comes back from click as the return code 130, not raised
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except WorkerError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted: measured iterations are kept in the run folder", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # click usage errors and the like
        import click
        usage = (click.exceptions.ClickException,)
        try:  # typer >= 0.24 raises its own vendored copy of click's exceptions
            from typer._click.exceptions import ClickException as TyperClickException
            usage += (TyperClickException,)
        except ImportError:
            pass
        if isinstance(e, usage):
            e.show()
            sys.exit(2)
        raise
    if code == 130:
        print("interrupted: measured iterations are kept in the run folder", file=sys.stderr)
    if isinstance(code, int) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()
