"""What `rlbench run` does around its cells: the checks before any cell starts, the run folder, the
table and report at the end (also after a failure or Ctrl-C), the last sweep for leftover processes,
and the one cell of an external engine (VERL, MindSpeed-RL, TRL)."""
from __future__ import annotations

import datetime as _dt
import inspect
import os
import shutil
import sys
from dataclasses import dataclass
from multiprocessing import resource_tracker
from pathlib import Path

import typer
from rlbench import reporting
from rlbench import experiments
from rlbench.core.components import BACKENDS
from rlbench.core.config_files import load_config
from rlbench.core.devices import device as dev
from rlbench.core.devices import limits, placement, procs, starting
from rlbench.core.errors import UserError, WorkerError
from rlbench.core.results import schema
from rlbench.engines import external
from rlbench.engines.data.source import load_dataset
from rlbench.run import curves, interleave
from rlbench.run.seeds import parse_seeds



def preflight(cfg, cells, ctx) -> None:
    """Reject bad data, missing files, loggers or a rollout backend's package that are not installed
    (looked for in this process, without importing them) and limits the run cannot fit
    (core/devices/limits.py: context length, memory) before any cell starts (exit code 2, no run
    folder). cells: [(name, config)] (the experiments' own checks, e.g. a peer framework installed);
    ctx: the context the cells start from (ablation.py cell_context). The checks that need neither
    torch nor transformers come first, here: such bad input is refused at once. The others run in a
    process of ctx: where that is forked from `rlbench run`'s fork server, which imports torch and
    transformers once for the whole run, this process never imports them (they would cost it ~8
    CPU-s more)."""
    curves.check_installed(cfg)  # run.logger's packages (bench/run/curves.py)
    for backend in sorted({cfg.rollout.backend} | {c.rollout.backend for _, c in cells}):
        # in this Python: the cells' processes run the same one
        missing = BACKENDS[backend].missing()
        if missing:
            raise UserError(missing)
    dataset = load_dataset(cfg.data, cfg.run.seed)
    if cfg.model.kind == "hf" and not (Path(cfg.model.path) / "config.json").is_file():
        raise UserError(f"model.path={cfg.model.path}: not a Hugging Face model directory (no "
                        f"config.json)")
    kind = dev.resolve_kind(cfg.engine.device)
    if kind != "npu":  # (NPU: counted in the cell, where torch_npu is imported anyway)
        # more than it has
        placement.plan(cfg.engine, kind, placement.claimable(cfg.engine, dev.available(kind)))
    if ctx.get_start_method() == "forkserver":
        # the run's server starts here: a fresh interpreter that imports the preload list, or, where
        # this process has imported it already and runs no thread (a fork of a process that did, as
        # the tests run the command), a fork of this one (starting.warm)
        starting.warm(True)
        in_process(ctx, check_fits, cfg, cells)
    else:  # spawned: a fresh process would import them for these checks alone
        check_fits(cfg, cells)


def check_fits(cfg, cells) -> None:
    """The checks that import torch and transformers (seconds): each experiment's own (a peer
    framework installed and accepting its config), the engine supports the config, and every prompt
    and the memory fit the model (core/devices/limits.py). UserError (exit 2) where one fails."""
    # inside: they import torch and transformers; `rlbench run`'s own process must not (preflight)
    from rlbench.engines.factory import check_supported
    from rlbench.engines.model.loader import model_facts
    from rlbench.engines.ray_nodes import check_cluster

    for runner in experiments.runners():
        runner.preflight(cells)
    check_supported(cfg)
    # a running Ray cluster holds every worker alive at once, where placed
    check_cluster(cfg, cells)
    dataset = load_dataset(cfg.data, cfg.run.seed)
    facts, tok = model_facts(cfg)
    prompt_max = max(len(tok.prompt_ids(dataset.prompt_text(p))) for p in dataset.train
                     + dataset.eval + dataset.seen)
    kind = dev.resolve_kind(cfg.engine.device)
    limits.check(cfg, facts, prompt_max, kind, dev.memory_capacity(kind))


def in_process(ctx, fn, *args) -> None:
    """fn(*args) in a new process of ctx (forked from the fork server: its imports are there); the
    UserError it raises is raised here. Anything else it raises prints its traceback there and fails
    here."""
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_answer, args=(send, fn, *args), name="rlbench-checks")
    proc.start()
    send.close()
    try:
        error = receive.recv()
    except EOFError:
        error = False  # it ended without an answer
    finally:
        receive.close()
        proc.join()
    if error is False:
        raise RuntimeError(f"the checks before the run failed (exit code {proc.exitcode}; see "
                           f"above)")
    if error is not None:
        raise UserError(error)


def _answer(send, fn, *args) -> None:
    """The process of `in_process`: None when fn(*args) passed, else its UserError's message."""
    starting.detach()  # forked by a fork server: let go of its life line (core/devices/starting.py)
    try:
        fn(*args)
    except UserError as e:
        send.send(str(e))
        return
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group: `rlbench run` ends too
        return
    send.send(None)


def check_out(root: Path) -> None:
    """--out refused before any work where no run folder could be made under it: the nearest part of
    the path that exists is not a folder, or one this user cannot write (exit 2; new_run_dir still
    catches the rest)."""
    found = Path(root).absolute()
    while not found.exists() and found != found.parent:
        found = found.parent
    why = ("Not a directory" if not found.is_dir() else
           None if os.access(found, os.W_OK | os.X_OK) else "Permission denied")
    if why:
        raise UserError(f"--out {root}: cannot create the run folder under {found}: {why}")


def new_run_dir(root: Path, name: str) -> Path:
    """A new run folder under --out; one that cannot be created or written is bad input (exit 2).
    Runs started at once with the same name each get their own: mkdir is the claim (atomic), and a
    name another process took meanwhile moves this one on to the next free suffix."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    i, path = 0, Path(root)
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        while True:
            path = Path(root) / (f"{stamp}-{name}" + (f"-{i}" if i else ""))
            i += 1
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        probe = path / ".write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(
            f"--out {root}: cannot create the run folder {path}: {e.strerror or e}"
        ) from None
    return path


@dataclass(frozen=True)
class Ending:
    """What `rlbench run` does after its cells. report: write tables, plots and report.html
    (--report); wide: print every column and section, not only the verdict and the key columns
    (--wide)."""
    report: bool = True
    wide: bool = False


def finish(run_dir: Path, end: Ending) -> None:
    """The verdict and table, and the report, from whatever was measured, also after a failure or
    Ctrl-C."""
    try:
        if not schema.load_run(run_dir):
            return
    except UserError:
        return
    # each experiment's CSV (families.csv: a families ladder only), shown below
    experiments.write_results(run_dir)
    typer.echo(reporting.summary_table_text(run_dir, wide=end.wide))
    if end.report:
        path = reporting.build_report(run_dir)
        typer.echo(f"report: {path}")
    typer.echo(f"results: {run_dir}")


def raise_failed(record: dict) -> None:
    failed = [c for c in record["cells"] if c["exit_code"]]
    if failed:
        raise WorkerError(f"{len(failed)} cell(s) failed: "
                          + ", ".join(f"{c['name']} (exit {c['exit_code']})"
                                                                        for c in failed))


def sweep() -> None:
    """The last backstop: any process still carrying this run's token (core/devices/procs.py)
    outside the cells' process groups, which are ended as each cell ends, is ended here, except this
    process and its multiprocessing resource tracker (it ends with this process and cleans up after
    it)."""
    token = os.environ.get(procs.RUN_ENV)
    spare = (os.getpid(), getattr(resource_tracker._resource_tracker, "_pid", None) or -1)
    left = procs.kill_all(lambda: procs.marked(token, spare), timeout_s=10.0) if token else []
    if left:
        print(f"warning: processes of this run still alive: {procs.describe(left)}",
              file=sys.stderr)


def run_external(engine: str, config: Path | None, sets: list[str], seeds: str | None, out: Path,
                 end: Ending, progress: bool = False) -> None:
    """`rlbench run --engine verl|mindspeed-rl|trl`: one cell run by the real VERL / MindSpeed-RL /
    TRL, in
    rlbench's result schema. sets: the --set overrides; seeds: the --seeds text (refused here);
    progress: a progress line, where the framework's runner draws one."""
    cfg = load_config(config, sets)
    curves.refuse_external(cfg, engine)
    if parse_seeds(seeds):
        raise UserError(f"--seeds {seeds}: only with --engine rlbench (run {engine} once per --set "
                        f"run.seed=N)")
    if engine not in external.FRAMEWORKS:
        raise UserError(f"--engine {engine!r}: allowed: rlbench, {', '.join(external.FRAMEWORKS)}")
    check_out(out)
    run_dir = new_run_dir(out, f"{cfg.run.name}-{engine}")
    runner = external.runner(engine)
    takes = inspect.signature(runner).parameters
    shows = {"progress": progress} if "progress" in takes else {}
    pacer = ring_pacer(engine, "pacer" in takes)
    try:
        runner(cfg, run_dir, **shows, **({"pacer": pacer} if pacer else {}))
    except UserError:
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing measured: no half-made run folder
        raise
    finally:
        if pacer:
            pacer.leave()  # its turns pass on, however it ended
    finish(run_dir, end)


def ring_pacer(engine: str, can_take_turns: bool):
    """A side of `rlbench check --env-a/--env-b/--set-b --engine NAME` (RLBENCH_RING set): the one
    cell takes its turns in the ring the check shares between the sides (bench/run/interleave.py),
    iteration k under A and under B back to back. -> its Pacer; None where the run is no side of a
    check."""
    shared = interleave.from_env()
    if not shared:
        return None
    if not can_take_turns:
        raise UserError(f"--engine {engine}: its cell cannot take turns with another side of "
                        "`rlbench check`")
    folder, side = shared
    return interleave.Pacer(interleave.Ring(folder).register(side, [engine])[0])
