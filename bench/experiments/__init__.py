"""Experiments: one folder each (bench/experiments/<name>/), holding its record (`EXPERIMENT` in the
folder's __init__.py: which ablations it adds and their cells, and its analysis, report section and
hooks into `rlbench run`, each imported on first use), its cells, its analysis, its report section
and a README. This module is their registry: EXPERIMENTS lists the records by import, one line each,
in report order (the first with a section heads it).

`--ablation NAME`, `rlbench run --help`, the end of a run, the verdict and every report (terminal,
summary.md, `--markdown`, report.html) read these records; no other module names an experiment
(tests/unit/experiments/test_experiments.py). The analysis and the reports are below the
experiments: they are given the records (the harness passes EXPERIMENTS). The shared pieces stay
where they are: running cells (bench/run/), the speedups and intervals every run gets (analysis/),
the HTML page and the table and plot helpers (reports/).
"""
from __future__ import annotations

from rlbench.core.experiments.spec import Analysis, ExperimentSpec, Report, Runner
from rlbench.experiments import families, peers, regime

# one line per experiment, in report order
EXPERIMENTS: dict[str, ExperimentSpec] = {e.name: e for e in (
    regime.EXPERIMENT,
    families.EXPERIMENT,
    peers.EXPERIMENT,
)}


def ablations() -> dict[str, list[tuple[str, dict]]]:
    """Every experiment's ablations: {ablation name: cells}, in registry order."""
    return {name: cells for e in EXPERIMENTS.values() for name, cells in e.cells().items()}


def about() -> dict[str, str]:
    """ablation name -> what it compares (`rlbench run --help`)."""
    return {name: text for e in EXPERIMENTS.values() for name, text in e.about.items()}


def workloads() -> dict[str, dict]:
    """A cell's run.workload -> the config overrides it lays over the run's config."""
    return {name: over for e in EXPERIMENTS.values() for name, over in e.workloads.items()}


def shared() -> dict[str, dict]:
    """ablation name -> settings every cell of it shares, laid under the user's --set."""
    return {name: tree for e in EXPERIMENTS.values() for name, tree in e.shared.items()}


def not_config() -> set[str]:
    """Switches of experiments' cells that are no config key."""
    return {s for e in EXPERIMENTS.values() for s in e.switches}


def analyses() -> list[Analysis]:
    return [e.load_analysis() for e in EXPERIMENTS.values()]


def reports() -> list[Report]:
    return [e.load_report() for e in EXPERIMENTS.values()]


def runners() -> list[Runner]:
    return [e.load_runner() for e in EXPERIMENTS.values()]


def write_results(run_dir) -> None:
    """Each experiment's CSV in run_dir (families.csv, peers.csv: only where the run is that
    experiment's), which the terminal and the report then show."""
    for a in analyses():
        a.write(run_dir)


def answers(run, sp) -> dict[str, object]:
    """experiment name -> what it says would change the verdict's answer, where the run is that
    experiment's."""
    found = {e.name: e.load_analysis().answer(run, sp) for e in EXPERIMENTS.values()}
    return {name: a for name, a in found.items() if a is not None}


def runner_of(cell: str):
    """The function that runs ablation cell `cell` in its process instead of rlbench's engine, or
    None."""
    return next((f for r in runners() if (f := r.runner_of(cell)) is not None), None)
