"""Multi-seed runs (`rlbench run --seeds 0,1,2`): each seed's cells form a run of their own
(per-seed tables, speedups against that seed's reference cell), then every cell is aggregated over
its seeds.

Files: summary.csv holds one row per cell (the median over seeds of every numeric column, `seeds`,
and for the headline metrics `<metric>_seed_min` / `<metric>_seed_max`: the spread over seeds;
tpspd_min / tpspd_max are the extremes over every seed's measured iterations); summary_seeds.csv
keeps one row per cell and seed. A speedup's interval over seeds is computed from the seeds'
speedups (analysis/intervals.py), not taken as a median of each seed's own.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from rlbench.analysis import intervals
from rlbench.analysis.data import RunData
from rlbench.analysis.speedup import speedup_frame
from rlbench.analysis.summary import summary_frame
from rlbench.core.results import metric_table, schema

SPREAD = metric_table.names(metric_table.SPREAD)  # core/results/metric_table.py
EXTREMES = metric_table.seed_extremes()
# A ratio's interval over seeds (one ratio per seed) replaces each seed's own: value column -> its
# prefix
INTERVALS = {"measured_speedup": "measured"}


def seeds_of(run: RunData) -> list[int]:
    """The seeds of a multi-seed run (ablation.json "seeds"); [] for a run of one seed."""
    path = run.path / schema.ABLATION
    if run.kind != "ablation" or not path.is_file():
        return []
    return list(json.loads(path.read_text()).get("seeds") or [])


def is_multi_seed(run: RunData) -> bool:
    return len(seeds_of(run)) > 1


def per_seed(run: RunData) -> dict[int, RunData]:
    """seed -> the run of that seed's cells, named without the seed suffix, reference cell first."""
    ref = schema.split_seeded(run.reference)[0]
    out: dict[int, RunData] = {}
    for seed in seeds_of(run):
        cells = [replace(c, name=base) for c in run.cells
                 for base, s in [schema.split_seeded(c.name)] if s == seed]
        cells.sort(key=lambda c: c.name != ref)
        missing = [schema.split_seeded(m)[0] for m in run.missing if schema.split_seeded(m)[1]
                   == seed]
        out[seed] = RunData(run.path, run.kind, run.name, ref, cells, run.predicted, missing)
    return out


def seed_frame(run: RunData, frame=summary_frame) -> pd.DataFrame:
    """frame(run of one seed) for every seed, stacked, with a `seed` column after `cell`."""
    parts = [frame(sub).assign(seed=seed) for seed, sub in per_seed(run).items() if sub.cells]
    if not parts:
        return frame(RunData(run.path, run.kind, run.name, run.reference, [])).assign(seed=None)
    df = pd.concat(parts, ignore_index=True)
    cols = list(df.columns)
    cols.insert(1, cols.pop(cols.index("seed")))
    return df[cols]


def aggregate(per: pd.DataFrame, spread: list[str] = SPREAD) -> pd.DataFrame:
    """One row per cell (first-seen order): numeric columns -> median over seeds (EXTREMES:
    min/max), others -> the first seed's value; `seeds` counts them; `<m>_seed_min/_seed_max` for m
    in spread."""
    rows = []
    for cell, g in per.groupby("cell", sort=False):
        row = {}
        for col in per.columns.drop("seed"):
            vals = g[col]
            numeric = pd.api.types.is_numeric_dtype(vals) and not pd.api.types.is_bool_dtype(vals)
            row[col] = getattr(vals, EXTREMES.get(col, "median"))() if numeric else vals.iloc[0]
        row["seeds"] = len(g)
        if "status" in g:
            done = int((g["status"] == "complete").sum())
            row["status"] = "complete" if done == len(g) else f"{done}/{len(g)} complete"
        for m in spread:
            if m in g:
                row[f"{m}_seed_min"], row[f"{m}_seed_max"] = g[m].min(), g[m].max()
        for value, prefix in INTERVALS.items():
            if value in g and f"{prefix}_low" in g:
                row.update(intervals.columns(intervals.over_seeds(list(g[value]), row[value]),
                                             prefix, value))
        rows.append(row)
    return pd.DataFrame(rows)


def seed_frames(run: RunData) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A multi-seed run's (summary per cell over its seeds, summary per cell and seed, speedups
    median over seeds)."""
    per = seed_frame(run)
    sp_per = seed_frame(run, speedup_frame)
    sp = aggregate(sp_per,
                   ["measured_speedup", "predicted_speedup"]) if len(sp_per) else speedup_frame(
        RunData(run.path, run.kind, run.name, run.reference, []))
    return aggregate(per), per, sp


def write_seed_csvs(run: RunData, df: pd.DataFrame, per: pd.DataFrame) -> None:
    """A multi-seed run's summary.csv (df: per cell, over its seeds) and summary_seeds.csv (per: per
    cell and seed), from seed_frames."""
    df.to_csv(run.path / "summary.csv", index=False)
    per.to_csv(run.path / "summary_seeds.csv", index=False)


def first_seed(run: RunData) -> RunData:
    """The first seed's run that has cells (the per-cell plots and an experiment's section show it);
    the run itself where no seed has."""
    return next((s for s in per_seed(run).values() if s.cells), run)


def cell_summary(run: RunData, frame=summary_frame, spread: list[str] = SPREAD) -> pd.DataFrame:
    """frame(run) with one row per cell: for a multi-seed run, aggregated over its seeds."""
    return aggregate(seed_frame(run, frame), spread) if is_multi_seed(run) else frame(run)


