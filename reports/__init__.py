"""Reports: tables, plots and a self-contained HTML report, read from result files only.

Imports of the core are limited to rlbench.schema, rlbench.stages and rlbench.errors (no engine
code, no torch), so `rlbench report` and `rlbench compare` are fast and need no accelerator.
"""
from rlbench.reports.build import build_report
from rlbench.reports.comparison import compare
from rlbench.reports.console import summary_table_text
from rlbench.reports.predict import predict_async

__all__ = ["build_report", "compare", "summary_table_text", "predict_async"]
