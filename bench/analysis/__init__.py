"""Analysis: every conclusion computed from result files, for the reports to render and the harness to
print. Loading a run (data.py), the summary and the speedups measured and predicted (summary.py,
speedup.py), the families ladder (families.py, ladder.py), the regime map and its crossover (regime.py,
cost_spread.py), time-to-accuracy and its intervals (accuracy.py, accuracy_table.py), seed aggregation
(seeds.py), the held-out columns (heldout.py) and two runs compared (comparison.py). It imports the core
only: no engine, no torch, no plotting."""
