"""Experiments: one folder each (bench/experiments/<name>/), holding its cells (what `--ablation NAME` runs),
its analysis (what it concludes from result files), its report section (text, table, plot) and a README; its
record (`EXPERIMENT` in the folder's __init__.py) is one line of the registry (core/experiments/). The
shared pieces stay where they are: running cells (bench/run/), the speedups and intervals every run gets
(analysis/), the HTML page and the table and plot helpers (reports/)."""
