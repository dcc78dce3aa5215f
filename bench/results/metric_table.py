"""One table of the metrics rlbench reports: name (the column), unit, how seeds aggregate it, and where
it shows. The summary table's columns, `rlbench compare`'s key metrics and the multi-seed spreads read
it (reports/tables.py, reports/comparison.py, reports/seeds.py); adding a reported metric is one row
here plus its value in the summary row (reports/tables.py `_row`)."""
from __future__ import annotations

from dataclasses import dataclass

# where a metric shows
SUMMARY = "summary"  # summary.csv / summary.md and the terminal table
COMPARE = "compare"  # `rlbench compare`: A, B and B/A per cell
SPREAD = "spread"  # multi-seed runs: median over seeds with its min-max spread


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    seeds: str  # how a multi-seed run aggregates it over seeds: "median", "min" or "max"
    shows: tuple[str, ...]
    what: str
    group: str = "head"  # "head": beside TPSPD in the summary; "tail": after the stage and idle columns


METRICS: tuple[Metric, ...] = (
    Metric("tpspd_median", "tokens/s/device", "median", (SUMMARY, COMPARE, SPREAD),
           "TPSPD, median over the measured iterations"),
    Metric("tpspd_min", "tokens/s/device", "min", (SUMMARY,), "TPSPD, slowest measured iteration"),
    Metric("tpspd_max", "tokens/s/device", "max", (SUMMARY,), "TPSPD, fastest measured iteration"),
    Metric("speedup", "x", "median", (SUMMARY, COMPARE, SPREAD), "median TPSPD over the reference cell's"),
    Metric("predicted_speedup", "x", "median", (SUMMARY,), "the cost model's prediction (rlbench.costmodel.predict)"),
    Metric("rollout_share", "fraction", "median", (SUMMARY,), "a colocated cell's rollout share of its time"),
    Metric("wall_s_median", "s", "median", (SUMMARY, COMPARE, SPREAD), "seconds per iteration, median"),
    Metric("rollout_tok_s", "tokens/s", "median", (SUMMARY, COMPARE), "rollout token rate, median"),
    Metric("train_tok_s", "tokens/s", "median", (SUMMARY, COMPARE), "training token rate, median"),
    Metric("weight_sync_s_per_iter", "s", "median", (SUMMARY,), "weight-sync seconds per iteration, all "
           "workers", "tail"),
    Metric("host_cpu_pct", "% of a core", "median", (SUMMARY,), "CPU of every process of the cell (driver "
           "included) per second of iteration, median", "tail"),
    Metric("rollout_occupancy", "fraction", "median", (SUMMARY,), "mean sequences in flight / max_num_seqs",
           "tail"),
    Metric("accuracy_before", "pass@1", "median", (SUMMARY,), "first evaluation", "tail"),
    Metric("accuracy_after", "pass@1", "median", (SUMMARY, COMPARE, SPREAD), "last evaluation", "tail"),
    Metric("format_rate_before", "fraction", "median", (SUMMARY,), "first evaluation: answers the strict rule "
           "can read", "tail"),
    Metric("format_rate_after", "fraction", "median", (SUMMARY,), "last evaluation: answers the strict rule "
           "can read", "tail"),
    Metric("accuracy_any_format_before", "fraction", "median", (SUMMARY,), "first evaluation: last number right",
           "tail"),
    Metric("accuracy_any_format_after", "fraction", "median", (SUMMARY, SPREAD), "last evaluation: last number "
           "right", "tail"),
    Metric("staleness_max", "versions", "max", (SUMMARY, COMPARE), "largest trained - behaviour version",
           "tail"),
    # data.split=fact only: the summary adds these columns where a run has them (reports/heldout.py)
    Metric("accuracy_heldout_gain", "pass@1", "median", (SPREAD,), "held-out facts: last minus first "
           "evaluation", "tail"),
    Metric("accuracy_seen_after", "pass@1", "median", (SPREAD,), "facts trained on: last evaluation", "tail"),
)


def names(where: str, group: str | None = None) -> list[str]:
    """The metrics that show in `where` (and, for the summary, sit in `group`), in table order."""
    return [m.name for m in METRICS if where in m.shows and (group is None or m.group == group)]


def seed_extremes() -> dict[str, str]:
    """Metrics a multi-seed run aggregates by their min or max over seeds instead of the median."""
    return {m.name: m.seeds for m in METRICS if m.seeds != "median"}
