"""What one experiment record says (bench/experiments/<name>/__init__.py holds one, `EXPERIMENT`),
and the three pieces it loads on first use: its analysis (`Analysis`), its report section (`Report`)
and its hooks into `rlbench run` (`Runner`). The analysis and the reports call these pieces of the
experiments they are given (the registry, bench/experiments/__init__.py, is above them).

Everything that differs between experiments outside their own folder is a field here, so
`--ablation`, `rlbench run --help`, the end of a run, the verdict, the terminal, summary.md,
`--markdown` and report.html read the records instead of naming an experiment.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

Cells = list[tuple[str, dict]]  # (cell name, the switches it sets), the first cell the reference


def _none(*_args):
    return None


def _empty(*_args) -> list:
    return []


@dataclass(frozen=True, kw_only=True)
class Analysis:
    """What an experiment computes from result files. write(run_dir) -> its CSV's path or None: the
    file the terminal and report render, written at the end of `rlbench run` and by `rlbench report`
    (an earlier one is removed where the run is not this experiment's); answer(run, sp) -> what it
    says would change the verdict's answer (sp: the run's speedup frame), or None where the run is
    not this experiment's."""
    write: Callable = _none
    answer: Callable = _none


@dataclass(frozen=True, kw_only=True)
class Report:
    """What an experiment adds to a run's report, each part empty (None, []) where the run is not
    the experiment's. html(run, sp) -> (title, HTML body): its section at the top of report.html
    (the first experiment, in registry order, that has one takes the place); files(run): extra files
    beside it (peers.md); brief(run) and wide(run, sp): the terminal's lines by default and with
    --wide (explains_speedup: its wide lines stand in for the attribution sentences); summary(run,
    sp): summary.md's lines; markdown(run, sp): `rlbench report --markdown`'s lines; notes(run):
    verdict sentences on what the run holds; change(answer): the verdict's sentence on what would
    change the answer, from Analysis.answer's value."""
    html: Callable = _none
    files: Callable = _none
    brief: Callable = _empty
    wide: Callable = _empty
    explains_speedup: bool = False
    summary: Callable = _empty
    markdown: Callable = _empty
    notes: Callable = _empty
    change: Callable = _none


@dataclass(frozen=True, kw_only=True)
class Runner:
    """An experiment's hooks into `rlbench run`. preflight(cells): refuse (UserError, exit 2) before
    any cell runs; before(ablation, base, run_dir): a step before the cells (a calibration);
    runner_of(cell) -> the function that runs a cell in its process instead of rlbench's engine (a
    peer framework), or None."""
    preflight: Callable = _none
    before: Callable = _none
    runner_of: Callable = _none


@dataclass(frozen=True, kw_only=True)
class ExperimentSpec:
    name: str  # its folder's name (bench/experiments/<name>/)
    summary: str
    # () -> {ablation name: cells}: what `--ablation NAME` runs; import-light, `rlbench --help`
    # counts the cells
    cells: Callable[[], dict[str, Cells]]
    about: dict[str, str]  # ablation name -> what it compares, for `rlbench run --help`
    # a cell's run.workload -> overrides of the config
    workloads: dict[str, dict] = field(default_factory=dict)
    shared: dict[str, dict] = field(default_factory=dict)  # ablation -> settings every cell shares
    # switches of its cells that are no config key (a peer framework's settings)
    switches: tuple[str, ...] = ()
    # the files its report section writes under plots/ (removed before a rebuild)
    plots: tuple[str, ...] = ()
    # () -> its Analysis, Report, Runner: each imported when first asked for (pandas, plotting), not
    # by `rlbench --help`, which reads the record
    analysis: Callable[[], Analysis] | None = None
    report: Callable[[], Report] | None = None
    runner: Callable[[], Runner] | None = None

    def load_analysis(self) -> Analysis:
        return self.analysis() if self.analysis else Analysis()

    def load_report(self) -> Report:
        return self.report() if self.report else Report()

    def load_runner(self) -> Runner:
        return self.runner() if self.runner else Runner()
