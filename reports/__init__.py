"""Reports: tables, plots and a self-contained HTML report, read from result files only.

Imports of the core are limited to the result schema and metric table (rlbench.core.results), the stage names
(rlbench.core.record.stages), rlbench.core.errors, the resolver of names (rlbench.core.by_name), the schedule
and experiment records and the cost model (no engine code, no torch), so `rlbench report` and `rlbench compare` are fast and need no accelerator. These are
the shared pieces (the HTML page, tables, plots, the terminal and markdown text); an experiment's own section
lives in its folder (bench/experiments/<name>/report.py) and is found through the registry. Reports render;
what they show is computed in the core (the speedup prediction: rlbench.core.costmodel.predict), the analysis
and the experiments' analyses.
The names below load on first use, so importing rlbench.reports costs nothing until a report is built
(pandas and matplotlib).
"""
from rlbench.core.by_name import resolve

# Named as the registries name their code (`module:attribute`), so tests/meta/test_structure.py sees these imports.
_WHERE = {"build_report": "rlbench.reports.build:build_report", "compare": "rlbench.reports.comparison:compare",
          "summary_table_text": "rlbench.reports.console:summary_table_text",
          "markdown_report": "rlbench.reports.markdown:markdown_report"}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return resolve(_WHERE[name])
