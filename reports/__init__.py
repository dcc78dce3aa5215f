"""Reports: tables, plots and a self-contained HTML report, read from result files only.

Imports of the core are limited to rlbench.schema, rlbench.stages and rlbench.errors (no engine
code, no torch), so `rlbench report` and `rlbench compare` are fast and need no accelerator.
The names below load on first use: `rlbench --help` and `rlbench simulate` import
rlbench.reports.predict and must not pay for pandas and matplotlib (the report builder).
"""
import importlib

_WHERE = {"build_report": "build", "compare": "comparison", "summary_table_text": "console",
          "predict_async": "predict"}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
