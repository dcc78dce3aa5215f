"""compare(run_a, run_b): key metrics of two runs side by side, with the ratio B/A (rendered by
reports/comparison.py).

Cells are matched by name where the runs share names, otherwise by position (reference first). A
multi-seed run (`--seeds`) is compared per cell over its seeds: the medians summary.csv holds.
"""
from __future__ import annotations

import pandas as pd

from rlbench.analysis.data import load
from rlbench.analysis.seeds import cell_summary
from rlbench.core.results import metric_table, schema
from rlbench.core.results.metric_table import COMPARE

KEY_METRICS = metric_table.names(COMPARE)  # bench/core/results/metric_table.py


def match_cells(a: list[str], b: list[str]) -> tuple[list[tuple[int, int]], str]:
    """Index pairs (row in A, row in B) and how they were matched ('name' or 'position')."""
    common = [n for n in a if n in b]
    if common:
        return [(a.index(n), b.index(n)) for n in common], "name"
    return [(i, i) for i in range(min(len(a), len(b)))], "position"


def compare(run_a, run_b) -> tuple[pd.DataFrame, str]:
    """Long table: one row per (matched cell, metric) with A, B and B/A; plus a line that says which runs
    and how their cells were matched.

    Metrics (units): tpspd_median (tokens/s/device), speedup (vs each run's reference cell),
    wall_s_median (s per iteration), rollout/train_tok_s (tokens/s), accuracy_after (pass@1),
    staleness_max (weight versions).
    """
    ra, rb = load(run_a), load(run_b)
    fa, fb = cell_summary(ra), cell_summary(rb)  # one row per cell (multi-seed: median over seeds)
    pairs, how = match_cells(list(fa["cell"]), list(fb["cell"]))
    rows = []
    for ia, ib in pairs:
        for m in KEY_METRICS:
            va, vb = _value(fa, ia, m), _value(fb, ib, m)
            rows.append({"cell_a": fa["cell"][ia], "cell_b": fb["cell"][ib], "metric": m,
                         "a": va, "b": vb, "b_over_a": schema.ratio(vb, va)})
    df = pd.DataFrame(rows, columns=["cell_a", "cell_b", "metric", "a", "b", "b_over_a"])
    unmatched = sorted((set(fa["cell"]) ^ set(fb["cell"]))) if how == "name" else []
    about = (f"A: {ra.path} ({ra.name})\nB: {rb.path} ({rb.name})\ncells matched by {how}"
             + (f"; only in one run: {', '.join(unmatched)}" if unmatched else ""))
    return df, about


def _value(df: pd.DataFrame, row: int, metric: str):
    v = df[metric][row]
    return None if v is None or (isinstance(v, float) and v != v) else v
