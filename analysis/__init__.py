"""Analysis: the conclusions every run gets, computed from result files, for the reports to render
and the harness to print. Loading a run (data.py), the summary and the speedups measured and
predicted (summary.py, speedup.py), the cost spread between cells (cost_spread.py), time-to-accuracy
and its intervals (accuracy.py, accuracy_table.py), seed aggregation (seeds.py), the held-out
columns (heldout.py), the verdict (verdict.py) and two runs compared (comparison.py). An
experiment's own analysis (a regime map, a families ladder, rlbench beside a peer) lives in its
folder (bench/experiments/<name>/analysis.py). It imports the core only: no engine, no torch, no
plotting."""
