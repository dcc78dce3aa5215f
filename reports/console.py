"""summary_table_text: what the terminal prints after a run (plain text, no colour, no rich).

By default it fits a 100-column window: the verdict, then the key columns (reports/tables.py KEY),
each experiment's brief lines where the run is its (a families ladder's line, a peer framework's
table), then where the rest is. wide=True (`--wide`): the verdict, then every headline column, the
definitions, the attribution sentences or an experiment's that stand in for them (a regime map's),
each experiment's section, the start-up by phase and the time-to-accuracy table. The experiments'
lines come from the records it is given (the harness passes the registry,
bench/experiments/__init__.py).
"""
from __future__ import annotations

from rlbench.analysis.accuracy_table import accuracy_frame
from rlbench.analysis.data import RunData, load
from rlbench.analysis.seeds import cell_summary, is_multi_seed
from rlbench.analysis.speedup import attribution, speedup_frame
from rlbench.analysis.startup import startup_rows
from rlbench.analysis.verdict import verdict_of
from rlbench.reports.accuracy_html import accuracy_text
from rlbench.reports.glossary import TERMINAL_NOTE
from rlbench.reports.startup_text import startup_lines
from rlbench.reports.tables import COMPACT_HEAD, attribution_text, compact_rows, key_table
from rlbench.reports.text_table import fit
from rlbench.reports.verdict_text import verdict_lines

MULTI_SEED = "median over seeds; per seed: summary_seeds.csv"
MORE = ("Every column: --wide, or summary.csv. What each column means: rlbench report --help, "
        "report.html.")


def summary_table_text(run_dir, add=(), wide: bool = False, experiments=()) -> str:
    """The verdict, then the table (key columns; wide: every headline column and the sections below
    it). TPSPD in tokens/s/device; a multi-seed run shows the median over seeds.
    add: other run folders whose cells join the table (analysis/data.merge). experiments: the
    records (ExperimentSpec) whose lines and sections it shows where the run is theirs."""
    run = load(run_dir, add)
    df, sp = cell_summary(run), cell_summary(run, speedup_frame, [])
    lines = verdict_lines(run, verdict_of(run, sp, df, experiments)) + [""]
    reports = [e.load_report() for e in experiments]
    return "\n".join(lines + (_wide(run, df, sp, reports) if wide else _key(run, df, reports)))


def _key(run: RunData, df, reports) -> list[str]:
    head, rows = key_table(df)
    lines = fit(head, rows)
    if is_multi_seed(run):
        lines.append(MULTI_SEED)
    brief = [line for r in reports for line in r.brief(run)]
    return lines + brief + ["", MORE]


def _wide(run: RunData, df, sp, reports) -> list[str]:
    """Every headline column and section, as `rlbench run` printed them before the key columns were
    chosen."""
    multi = is_multi_seed(run)
    lines = fit(COMPACT_HEAD, compact_rows(df), width=10**6)
    if multi:
        lines.append(MULTI_SEED)
    lines += ["", TERMINAL_NOTE]
    # the experiments' sections; one that explains the speedups (a regime map: one
    # sentence per point, its attribution included) stands in for the attribution sentences
    sections = [(r, r.wide(run, sp)) for r in reports]
    if not any(found for r, found in sections if r.explains_speedup):
        lines += attribution_text(attribution(sp))
    for _, found in sections:
        lines += found
    # where each cell's start-up went (analysis/startup.py)
    lines += startup_lines(startup_rows(run))
    return lines + accuracy_text(accuracy_frame(run))
