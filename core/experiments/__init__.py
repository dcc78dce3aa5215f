"""The experiment registry: each experiment is one folder, bench/experiments/<name>/, whose record
(`EXPERIMENT`, an ExperimentSpec of spec.py) says which ablations it adds and their cells, and where its
analysis, its report section and its hooks into `rlbench run` live; REGISTERED holds one line per experiment.

`--ablation NAME`, `rlbench run --help`, the end of a run, the verdict and every report (terminal, summary.md,
`--markdown`, report.html) read these records; no other module names an experiment (tests/unit/experiments/test_experiments.py).
Records are light (no pandas, no plotting) and name their analysis and report by import path, imported only
when a run's results are read, so the core imports no experiment code.
"""
from __future__ import annotations

from rlbench.core.by_name import resolve
from rlbench.core.experiments.spec import Analysis, ExperimentSpec, Report, Runner

REGISTERED = (  # one line per experiment, "module:record", in report order (the first with a section heads it)
    "rlbench.experiments.regime:EXPERIMENT",
    "rlbench.experiments.families:EXPERIMENT",
    "rlbench.experiments.peers:EXPERIMENT",
)


_loaded: dict[str, ExperimentSpec] = {}


def _all() -> dict[str, ExperimentSpec]:
    """The records, loaded on first use: a record's module imports spec.py from this package, so loading
    them while this package initialises would be circular."""
    if not _loaded:
        _loaded.update((e.name, e) for e in map(resolve, REGISTERED))
    return _loaded


def __getattr__(name: str):
    if name == "EXPERIMENTS":  # {name: record}, in REGISTERED order
        return _all()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def ablations() -> dict[str, list[tuple[str, dict]]]:
    """Every experiment's ablations: {ablation name: cells}, in registry order."""
    return {name: cells for e in _all().values() for name, cells in e.cells().items()}


def about() -> dict[str, str]:
    """ablation name -> what it compares (`rlbench run --help`)."""
    return {name: text for e in _all().values() for name, text in e.about.items()}


def workloads() -> dict[str, dict]:
    """A cell's run.workload -> the config overrides it lays over the run's config."""
    return {name: over for e in _all().values() for name, over in e.workloads.items()}


def shared() -> dict[str, dict]:
    """ablation name -> settings every cell of it shares, laid under the user's --set."""
    return {name: tree for e in _all().values() for name, tree in e.shared.items()}


def not_config() -> set[str]:
    """Switches of experiments' cells that are no config key."""
    return {s for e in _all().values() for s in e.switches}


def plot_files() -> list[str]:
    """The files the experiments' report sections write under a run's plots/."""
    return [f for e in _all().values() for f in e.plots]


def analyses() -> list[Analysis]:
    return [e.load_analysis() for e in _all().values()]


def reports() -> list[Report]:
    return [e.load_report() for e in _all().values()]


def runners() -> list[Runner]:
    return [e.load_runner() for e in _all().values()]


def write_results(run_dir) -> None:
    """Each experiment's CSV in run_dir (families.csv, peers.csv: only where the run is that experiment's),
    which the terminal and the report then show."""
    for a in analyses():
        a.write(run_dir)


def answers(run, sp) -> dict[str, object]:
    """experiment name -> what it says would change the verdict's answer, where the run is that experiment's."""
    found = {e.name: e.load_analysis().answer(run, sp) for e in _all().values()}
    return {name: a for name, a in found.items() if a is not None}


def runner_of(cell: str):
    """The function that runs ablation cell `cell` in its process instead of rlbench's engine, or None."""
    return next((f for r in runners() if (f := r.runner_of(cell)) is not None), None)
