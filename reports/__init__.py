"""Reports: tables, plots and a self-contained HTML report, read from result files only.

Imports of the core are limited to the result schema and metric table (rlbench.core.results), the
stage names (rlbench.core.record.stages), rlbench.core.errors, the schedule
and experiment records and the cost model (no engine code, no torch), so `rlbench report` and
`rlbench compare` are fast and need no accelerator. These are the shared pieces (the HTML page,
tables, plots, the terminal and markdown text); an experiment's own section lives in its folder
(bench/experiments/<name>/report.py) and is found through the registry. Reports render; what they
show is computed in the core (the speedup prediction: rlbench.core.costmodel.predict), the analysis
and the experiments' analyses. The names below load on first use, so importing rlbench.reports costs
nothing until a report is built (pandas and matplotlib).
"""
__all__ = ["build_report", "compare", "summary_table_text", "markdown_report"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # inside: pandas, not for `--help`
    from rlbench.reports import build, comparison, console, markdown
    return {"build_report": build.build_report, "compare": comparison.compare,
            "summary_table_text": console.summary_table_text,
            "markdown_report": markdown.markdown_report}[name]
