"""compare(run_a, run_b, ...): key metrics of the runs side by side, with each run's ratio over the
first (B/A, C/A, ...; rendered by reports/comparison.py).

Cells are matched by name where the runs share names, otherwise by position (reference first). A
multi-seed run (`--seeds`) is compared per cell over its seeds: the medians summary.csv holds.
"""
from __future__ import annotations

import pandas as pd

from rlbench.analysis.data import load
from rlbench.analysis.seeds import cell_summary
from rlbench.core.results import metric_table, schema
from rlbench.core.results.metric_table import COMPARE

KEY_METRICS = metric_table.names(COMPARE)  # core/results/metric_table.py


def match_cells(a: list[str], b: list[str]) -> tuple[list[tuple[int, int]], str]:
    """Index pairs (row in A, row in B) and how they were matched ('name' or 'position')."""
    common = [n for n in a if n in b]
    if common:
        return [(a.index(n), b.index(n)) for n in common], "name"
    return [(i, i) for i in range(min(len(a), len(b)))], "position"


def compare(run_a, run_b, *more) -> tuple[pd.DataFrame, str]:
    """Long table: one row per (cell of A matched in every run, metric) with each run's value
    (columns a, b, c, ...) and its ratio over A (b_over_a, c_over_a, ...); plus the lines that say
    which runs they are and how their cells were matched.

    Metrics (units): tpspd_median (tokens/s/device), speedup (vs each run's reference cell),
    wall_s_median (s per iteration), rollout/train_tok_s (tokens/s), accuracy_after (pass@1),
    staleness_max (weight versions).
    """
    runs = [load(r) for r in (run_a, run_b, *more)]
    frames = [cell_summary(r) for r in runs]  # one row per cell (multi-seed: median over seeds)
    letters = [chr(ord("a") + i) for i in range(len(runs))]
    matched, hows, unmatched = _matched(frames)
    rows = []
    for picks in matched:
        for m in KEY_METRICS:
            vals = [_value(f, i, m) for f, i in zip(frames, picks)]
            row = {f"cell_{x}": f["cell"][i]
                   for x, f, i in zip(letters, frames, picks)} | {"metric": m}
            row |= dict(zip(letters, vals))
            row |= {f"{x}_over_a": schema.ratio(v, vals[0]) for x, v in zip(letters[1:], vals[1:])}
            rows.append(row)
    columns = [f"cell_{x}" for x in letters] + ["metric"] + letters + [f"{x}_over_a" for x
                                                                       in letters[1:]]
    about = "\n".join(f"{x.upper()}: {r.path} ({r.name})" for x, r in zip(letters, runs))
    about += "\ncells matched by " + ", ".join(sorted(set(hows))) + \
        (f"; not in every run: {', '.join(unmatched)}" if unmatched else "")
    return pd.DataFrame(rows, columns=columns), about


def _matched(frames: list[pd.DataFrame]) -> tuple[list[tuple[int, ...]], list[str], list[str]]:
    """Row indices of each cell of the first run matched in every other run, how each run was
    matched, and the cells (by name) that some run lacks."""
    first = list(frames[0]["cell"])
    per, hows = [], []
    for f in frames[1:]:
        pairs, how = match_cells(first, list(f["cell"]))
        per.append(dict(pairs))
        hows.append(how)
    keep = [i for i in range(len(first)) if all(i in p for p in per)]
    named = [set(f["cell"]) for f, how in zip(frames[1:], hows) if how == "name"]
    unmatched = sorted(set().union(*named, set(first)) - set.intersection(set(first),
                                                                          *named)) if named else []
    return [(i, *(p[i] for p in per)) for i in keep], hows, unmatched


def _value(df: pd.DataFrame, row: int, metric: str):
    v = df[metric][row]
    return None if v is None or (isinstance(v, float) and v != v) else v
