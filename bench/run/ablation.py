"""Ablations: named lists of cells, each run in its own process with the same seed and config except
its switches; one folder per cell plus ablation.json. `run_ablation` is what `rlbench run` does.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import typer
from rlbench import experiments
from rlbench.core import schedules
from rlbench.core.config import RunConfig
from rlbench.core.config_files import (DEFAULT_CONFIG, load_config, merge_trees, parse_overrides,
                                       with_overrides)
from rlbench.core.devices import device as dev
from rlbench.core.devices import starting
from rlbench.core.errors import UserError
from rlbench.core.results import provenance, schema
from rlbench.engines.model import weight_file
from rlbench.planted import slowdown
from rlbench.run import interleave as ring
from rlbench.run.ablation_table import ABLATIONS, WORKLOADS
from rlbench.run.around import Ending, check_out, finish, new_run_dir, preflight, raise_failed
from rlbench.run.board import Board
from rlbench.run.processes import cell_main, interrupt, reap, run_interleaved, start
from rlbench.run.seed_pool import CellProcess, parallel_plan, run_parallel
from rlbench.run.seeds import expand, parse_seeds

# Where each switch lives in the config: the two optimisations, and every schedule's options (their
# records).
SWITCH_KEYS = {"schedule": "engine.schedule", "tri_model": "engine.tri_model",
               "shared_prompt": "engine.shared_prompt",
               "shared_prompt_impl": "engine.shared_prompt_impl",
               "ppo_mini_batches": "train.ppo_mini_batches",
              **schedules.option_keys()}
# switches that are no config key (which framework runs a cell and its own settings): the
# experiments' records
NOT_CONFIG = experiments.not_config()
# Settings every cell of an ablation shares, laid under the user's --set (the cells still differ
# only in their switches).
SHARED = experiments.shared()


def off_values(name: str | None = None) -> dict:
    """Every key an ablation varies (all of them, or those of ablation `name`) at its default, its
    "off" value (defined once, where the option is declared): a cell is the base config with these,
    then its own switches, so cells differ only in their switches. A key no cell of `name` varies
    keeps the user's value."""
    ablations = [ABLATIONS[name]] if name else list(ABLATIONS.values())
    varied = {k for cells in ablations for _, sw in cells for k in sw} - {"schedule", "workload",
                                                                          *NOT_CONFIG}
    defaults = RunConfig().model_dump(mode="json")
    return {k: defaults[SWITCH_KEYS[k].split(".")[0]][SWITCH_KEYS[k].split(".")[1]] for k
               in sorted(varied)}


def cells_for(name: str, base: RunConfig,
              overrides: dict | None = None) -> list[tuple[str, RunConfig]]:
    """The ablation's cells: base, then the cell's workload (a regime point), then `overrides` (the
    user's --set tree: it still changes a workload's values, e.g. run.iterations for a first look),
    then the cell's switches, which nothing overrides (they are what the cells differ in)."""
    if name == "none":
        return [(base.engine.schedule, base)]
    if name not in ABLATIONS:
        raise UserError(f"--ablation {name!r}: allowed: {', '.join(['none', *ABLATIONS])}")
    shared = merge_trees(SHARED[name], overrides or {}) if name in SHARED else {}
    cells = [(cell, with_overrides(base, merge_trees(shared, _overrides({**off_values(name), **sw},
                                                                        overrides or {}))))
             for cell, sw in ABLATIONS[name]]
    return in_pairs(cells) if cells[0][1].run.interleave_pairs else cells


def in_pairs(cells: list[tuple[str, RunConfig]]) -> list[tuple[str, RunConfig]]:
    """run.interleave_pairs: the reference cell beside each other cell in turn, [(ref@other, ref),
    (other, other)] for each, every pair its own turn group (run.turn_group: the other cell's
    name)."""
    (ref, ref_cfg), others = cells[0], cells[1:]
    if not others:
        raise UserError("run.interleave_pairs: the ablation has one cell, nothing to pair the "
                        "reference with")
    out = []
    for name, cfg in others:
        group = {"run": {"turn_group": name, "interleave": True}}
        out += [(f"{ref}@{name}", with_overrides(ref_cfg, group)),
                (name, with_overrides(cfg, group))]
    return out


def _overrides(switches: dict, user: dict) -> dict:
    """Flat switches -> the nested override tree, each under its config section; a workload's
    overrides (with the user's laid over them) go under the switches, its name is kept in
    run.workload."""
    tree: dict = {}
    workload = switches.get("workload")
    if workload:
        tree = merge_trees(WORKLOADS[workload], user)
        tree = merge_trees(tree, {"run": {"workload": workload}})
    for key, value in switches.items():
        if key != "workload" and key not in NOT_CONFIG:
            section, name = SWITCH_KEYS[key].split(".")
            tree = merge_trees(tree, {section: {name: value}})
    return tree


def folder_name(cell: str) -> str:
    return cell.replace("+", "plus_").replace("/", "--").strip("_") or "cell"


def new_record(name: str, base: RunConfig, cells, seeds: list[int] | None,
               overrides: dict | None = None,
               config: Path | None = None) -> dict:
    """ablation.json's content before any cell ran: the cells, and what `--resume` needs to run them
    again (the base config, the --set tree laid over regime points, the seeds, the code version);
    and what a table made from the run states beside it (`rlbench report --markdown`): the command,
    the config file, the machine and the date."""
    record = {"schema_version": schema.SCHEMA_VERSION, "kind": "ablation", "name": name,
              "reference": cells[0][0],
              "cells": [{"name": c, "dir": folder_name(c), "switches": cfg.switches(),
                         "exit_code": None,
                         **({"cell": schema.split_seeded(c)[0], "seed": s} if seeds else {})}
                        for c, cfg, s in cells],
              "config": base.model_dump(mode="json"), "overrides": overrides or {},
              "code_digest": provenance.code_digest(),
              "command": command_line(),
              "config_file": str(config) if config else _in_tree(DEFAULT_CONFIG),
              "machine": provenance.machine(), "created": provenance.now()}
    if seeds:
        record["seeds"] = seeds
    return record


# Environment variables that change what a run measures (the planted test hooks): part of its
# command.
PLANTED_ENV = ("RLBENCH_SLOW", "RLBENCH_PAUSE", "RLBENCH_FAULT")


def command_line(argv: list[str] | None = None, environ=None) -> str:
    """The command that made this run, as it would be typed again: `rlbench` and its arguments
    (sys.argv; the program's path shortened to `rlbench`), after the planted test hooks the
    environment sets. A run started otherwise (a test calling run_ablation) keeps its argv as it
    is."""
    argv = list(sys.argv if argv is None else argv)
    env = os.environ if environ is None else environ
    program = Path(argv[0]).name if argv else ""
    words = ["rlbench", *argv[1:]] if program in ("rlbench", "cli.py") else argv
    planted = [f"{k}={env[k]}" for k in PLANTED_ENV if env.get(k)]
    return " ".join([*map(shlex.quote, planted), shlex.join(words)]).strip()


def _in_tree(path: Path) -> str:
    """A file of rlbench's tree as the documentation names it (configs/cpu-default.yaml)."""
    try:
        return Path(path).resolve().relative_to(provenance.source_root()).as_posix()
    except ValueError:
        return str(path)


def run_ablation(name: str, config: Path | None, sets: list[str], out: Path, end=None,
                 progress: bool = True, seeds: str | None = None) -> None:
    """`rlbench run`: every cell of the ablation (once per seed, bench/run/seeds.py) in its own
    process (run_cells -> `run_cell`, bench/run/cell.py), then the table and report. sets: the --set
    overrides; seeds: the --seeds text; end: what to print and write at the end (around.Ending,
    default: the report and the default table). Bad input is refused (exit 2) before anything
    runs."""
    base, overrides = load_config(config, sets), parse_overrides(sets)
    seeds = parse_seeds(seeds)
    # unknown ablation name or invalid cell -> exit 2 before anything runs
    cells = cells_for(name, base, overrides)
    # a malformed RLBENCH_SLOW -> exit 2, nothing run
    slowdown.parse(os.environ.get(slowdown.ENV, ""))
    ctx = cell_context([cfg for _, cfg in cells])  # a malformed RLBENCH_START likewise
    check_out(out)  # a --out that cannot hold a run folder, before the checks start a fork server
    # and the experiments' own checks (e.g. a peer framework's cells: installed)
    preflight(base, cells, ctx)
    run_dir = new_run_dir(out, base.run.name if name == "none" else f"{base.run.name}-{name}")
    typer.echo(f"rlbench: {name} on {config or 'configs/cpu-default.yaml'} -> {run_dir}", err=True)
    try:
        cells = expand(cells, seeds)
        record = new_record(name, base, cells, seeds, overrides, config)
        schema.atomic_write_json(run_dir / schema.ABLATION, record)
        # a calibration step before the cells (the regime map's)
        for runner in experiments.runners():
            runner.before(name, base, run_dir)
        record = run_cells(cells, record, run_dir, progress)
    finally:
        finish(run_dir, end or Ending())
    raise_failed(record)


def turn_groups(todo: list, shared_ring: bool) -> list[list]:
    """The cells that take turns together: the cells of one turn group (run.interleave_pairs: the
    reference and one other cell), of one workload (a regime point) or of the whole ablation, per
    seed, so a point's sync, barrier and periodic-async see the same machine iteration by iteration
    while the groups run one after the other (24 cells, or a large model's cells, at once would not
    fit in memory); in a ring shared with another tree (`check --against`), all of them."""
    if shared_ring:
        return [todo]
    groups: dict = {}
    for entry, (cell, cfg, seed) in todo:
        groups.setdefault((cfg.run.turn_group or cfg.run.workload, seed),
                          []).append((entry, (cell, cfg, seed)))
    return list(groups.values())


def takes_turns(groups: list[list], shared_ring: bool) -> bool:
    """Whether the cells run in a turn ring: where a config asks for it (run.interleave, the
    default) and some group has two cells to compare (one cell per seed has nothing to take turns
    with: the seeds run side by side or one after another), or always in a ring shared with another
    tree."""
    asked = any(cfg.run.interleave for group in groups for _, (_, cfg, _) in group)
    return shared_ring or (asked and any(len(group) > 1 for group in groups))


def holds_device(cfg) -> bool:
    """Whether a cell's own process holds an accelerator: only where its schedule runs in that
    process (its record says so, e.g. engine.sync_layout=single_process) on one. Otherwise the cell
    process is the driver, which holds none (its workers do: engines/hosts.py)."""
    return cfg.engine.device != "cpu" and schedules.of(cfg).in_process(cfg)


def cell_context(configs: list):
    """The multiprocessing context the cell processes start from: forked from `rlbench run`'s fork
    server (a fresh interpreter that never touched a device: core/devices/starting.py), a cell that
    holds an accelerator itself too, with the environment `rlbench run` had; spawned where one holds
    an NPU or RLBENCH_START=spawn."""
    # Idle OpenMP threads sleep instead of spinning: on a machine shared with other work, spinning
    # threads of a multi-threaded cell starve everything else (measured 10x+ slowdowns here). Set
    # before the fork server starts (the checks before the run start it): its processes have its
    # environment.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return starting.context(not any(holds_device(cfg) and dev.resolve_kind(cfg.engine.device)
                                    == "npu"
                                    for cfg in configs))


def run_cells(cells, record: dict, run_dir: Path, progress: bool) -> dict:
    """Run the cells whose entry in record has no exit code 0 yet (all of them, unless resumed),
    each in its own process; exit codes go into record and ablation.json as they come. Cells take
    turns by iteration (bench/run/interleave.py) when any cell's config asks for it (run.interleave:
    the user's, or a regime point's). progress: the cells' progress lines (bench/run/board.py)."""
    ctx = cell_context([cfg for _, cfg, _ in cells])
    try:
        with Board(progress) as board:
            return _run_todo(ctx, cells, record, run_dir, board)
    finally:
        # the run's weight files (engines/model/weight_file.py): no cell starts any more
        weight_file.remove(run_dir)


def _run_todo(ctx, cells, record: dict, run_dir: Path, board: Board) -> dict:
    todo = [(entry, cell) for entry, cell in zip(record["cells"], cells) if entry["exit_code"] != 0]
    shared = bool(ring.from_env())
    groups = turn_groups(todo, shared_ring=shared)
    if takes_turns(groups, shared):
        for group in groups:
            run_interleaved(ctx, [c for _, c in group], [e for e, _ in group], record, run_dir,
                            board)
        return record
    slots = parallel_plan(todo)  # seeds side by side, each on its own cores
    if slots:
        return run_parallel(ctx, todo, record, run_dir, board, slots,
                            CellProcess(cell_main, start, reap, interrupt))
    for entry, (cell, cfg, _) in todo:
        proc = ctx.Process(target=cell_main, name=f"rlbench-cell-{cell}",
                           args=(cfg.model_dump(mode="json"), str(run_dir / entry["dir"]), cell,
                                 board.open(cell)))
        start(proc)
        board.started(cell)
        try:
            proc.join()
        except KeyboardInterrupt:
            interrupt([proc])
            entry["exit_code"] = 130
            schema.atomic_write_json(run_dir / schema.ABLATION, record)
            raise
        finally:
            reap(proc)
        entry["exit_code"] = proc.exitcode
        board.ended(cell, proc.exitcode)
        schema.atomic_write_json(run_dir / schema.ABLATION, record)
        if proc.exitcode == 2:
            raise UserError(f"cell {cell} rejected its input (see the error above)")
    return record
