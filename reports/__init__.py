"""Reports: tables, plots and a self-contained HTML report, read from result files only.

Imports of the core are limited to rlbench.schema, rlbench.stages and rlbench.errors (no engine
code, no torch), so `rlbench report` and `rlbench compare` are fast and need no accelerator.
Reports render; what they show is computed in the core (the speedup prediction: rlbench.predict).
The names below load on first use, so importing rlbench.reports costs nothing until a report is built
(pandas and matplotlib).
"""
import importlib

_WHERE = {"build_report": "build", "compare": "comparison", "summary_table_text": "console"}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
