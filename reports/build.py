"""build_report: tables, plots and report.html for any valid run folder (one cell or an
ablation)."""
from __future__ import annotations

from pathlib import Path

from rlbench.analysis.accuracy import curves
from rlbench.reports.accuracy_html import accuracy_html
from rlbench.reports.accuracy_plots import CAPTIONS, write_accuracy_plots
from rlbench.analysis.accuracy_table import write_accuracy_table
from rlbench.analysis.data import load
from rlbench.reports.html import write_html
from rlbench.reports.plots import write_plots
from rlbench.analysis.seeds import first_seed, is_multi_seed, seed_frames, write_seed_csvs
from rlbench.reports.seeds_summary import write_seed_summary_md
from rlbench.analysis.speedup import speedup_frame
from rlbench.analysis.summary import summary_frame, write_summary_csv
from rlbench.analysis.verdict import verdict_of
from rlbench.reports.tables import write_summary_md
from rlbench.reports.verdict_text import verdict_html, verdict_markdown


def build_report(run_dir, add=(), experiments=()) -> Path:
    """Write summary.csv, summary.md, accuracy.csv, plots/*.png and report.html into run_dir;
    returns the HTML path; summary.md and report.html open with the verdict (analysis/verdict.py). A
    multi-seed run (--seeds) gets one aggregated row per cell (and summary_seeds.csv); its per-cell
    plots and regime map show the first seed, the accuracy plots every seed. A run of several
    points (`--ablation regime`) also gets regime.csv and plots/regime.png, at the top of the
    report; a families ladder (`--ablation families`) families.csv and its ladder there; rlbench
    beside a peer framework (`--ablation peers`) peers.csv, and peers.md, "Against a real
    framework", there. add: other run folders whose cells join this report (written into run_dir).
    experiments: the records (ExperimentSpec, in registry order) whose sections it shows where the
    run is theirs.

    Works on whatever was measured: a single cell, an ablation, a cell that was interrupted or
    failed with zero iterations. Raises rlbench.core.errors.UserError when run_dir is not a run
    folder.
    """
    run = load(run_dir, add)
    multi = is_multi_seed(run)
    df, per, sp = seed_frames(run) if multi else (summary_frame(run), None, speedup_frame(run))
    reports = [e.load_report() for e in experiments]
    verdict = verdict_of(run, sp, df, experiments)  # the first thing summary.md and report.html say
    # the tables are the analysis's to write (summary.csv, summary_seeds.csv), the words ours
    if multi:
        write_seed_csvs(run, df, per)
        write_seed_summary_md(run, df, sp, verdict_markdown(run, verdict))
        shown = first_seed(run)
    else:
        write_summary_csv(run, df)
        write_summary_md(run, df, sp, verdict_markdown(run, verdict),
                         [line for r in reports for line in r.summary(run, sp)])
        shown = run
    plots = write_plots(shown, df, sp, [f for e in experiments for f in e.plots])
    # an experiment's section (a regime map, a families ladder, a peer framework beside rlbench):
    # first
    headline = experiment_section(shown, sp if shown is run else speedup_frame(shown), reports)
    for r in reports:
        r.files(shown, run.path)  # e.g. peers.md
    acc = write_accuracy_table(run)
    target = acc["target"].iloc[0] if len(acc) else None
    acc_plots = write_accuracy_plots(curves(run), acc, None if target != target else target,
                                     run.path / "plots")
    section = ("Accuracy: time to target, final accuracy, throughput trade-off",
               accuracy_html(acc, acc_plots, CAPTIONS))
    return write_html(run, df, sp, plots, sections=[section], headline=headline,
                      verdict=verdict_html(run, verdict))


def experiment_section(run, sp, reports) -> tuple[str, str] | None:
    """The section at the top of report.html: the first experiment's Report, in registry order, that
    has one for this run; the later ones are not asked (a section writes its files as it is
    made)."""
    for r in reports:
        section = r.html(run, sp)
        if section:
            return section
    return None
