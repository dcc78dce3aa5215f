"""One table of the metrics rlbench reports: name (the column), unit, how seeds aggregate it, and
where it shows. The summary table's columns, `rlbench compare`'s key metrics and the multi-seed
spreads read it (analysis/summary.py, analysis/comparison.py, analysis/seeds.py); adding a reported
metric is one row here plus its value in the summary row (analysis/summary.py `_row`).

`rlbench check` reads its rows too (bench/check/metrics.py, ab.py): one row per metric family, whose
name is a pattern (`speedup:{cell}/{ref}`: the family, then the cells or stage it is of) and whose
`what` is the description check prints, filled in the same way; its kind and direction are what
check judges it by. A family check computes is one row here (tests/unit/harness/test_check.py holds
check to the table).
"""
from __future__ import annotations

from dataclasses import dataclass

# where a metric shows
SUMMARY = "summary"  # summary.csv / summary.md and the terminal table
COMPARE = "compare"  # `rlbench compare`: A, B and B/A per cell
SPREAD = "spread"  # multi-seed runs: median over seeds with its min-max spread
CHECK = "check"  # `rlbench check`: regressions against a baseline or the accepted commit

# How check judges a family (its kind): performance, as a paired ratio ("ratio": a throughput,
# "cost": CPU seconds of a stage) or a share of wall time ("share"); "accuracy", loosely, by
# tolerance; an "invariant" strictly: it must be 0 (bench/check/verdicts.py judge).
CHECK_KINDS = ("ratio", "cost", "accuracy", "share", "invariant")
# Which way is better, the other being a regression. An invariant is judged on |value| and records
# higher_is_better only because every stored metric names a direction.
DIRECTIONS = ("higher_is_better", "lower_is_better")


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    # how a multi-seed run aggregates it over seeds: "median", "min" or "max"; check rows:
    seeds: str
    # "pooled" (every seed's per-iteration samples, the statistic taken over all), "mean", "worst"
    # (the largest |value|) or "each" (one metric per seed's cell)
    shows: tuple[str, ...]
    what: str
    # "head": beside TPSPD in the summary; "tail": after the stage and idle columns
    group: str = "head"
    kind: str = ""  # check rows: one of CHECK_KINDS
    direction: str = ""  # check rows: one of DIRECTIONS


METRICS: tuple[Metric, ...] = (
    Metric("tpspd_median", "tokens/s/device", "median", (SUMMARY, COMPARE, SPREAD),
           "TPSPD, median over the measured iterations"),
    Metric("tpspd_min", "tokens/s/device", "min", (SUMMARY,), "TPSPD, slowest measured iteration"),
    Metric("tpspd_max", "tokens/s/device", "max", (SUMMARY,), "TPSPD, fastest measured iteration"),
    Metric("speedup", "x", "median", (SUMMARY, COMPARE, SPREAD),
           "median TPSPD over the reference cell's"),
    Metric("predicted_speedup", "x", "median", (SUMMARY,),
           "the cost model's prediction (rlbench.core.costmodel.predict)"),
    Metric("rollout_share", "fraction", "median", (SUMMARY,),
           "a colocated cell's rollout share of its time"),
    Metric("wall_s_median", "s", "median", (SUMMARY, COMPARE, SPREAD),
           "seconds per iteration, median"),
    Metric("rollout_tok_s", "tokens/s", "median", (SUMMARY, COMPARE), "rollout token rate, median"),
    Metric("train_tok_s", "tokens/s", "median", (SUMMARY, COMPARE), "training token rate, median"),
    Metric("weight_sync_s_per_iter", "s", "median", (SUMMARY,),
           "weight-sync seconds per iteration, all workers", "tail"),
    Metric("host_cpu_pct", "% of a core", "median", (SUMMARY,),
           "CPU of every process of the cell (driver "
           "included) per second of iteration, median", "tail"),
    Metric("rollout_occupancy", "fraction", "median", (SUMMARY,),
           "mean sequences in flight / max_num_seqs",
           "tail"),
    Metric("accuracy_before", "pass@1", "median", (SUMMARY,), "first evaluation", "tail"),
    Metric("accuracy_after", "pass@1", "median", (SUMMARY, COMPARE, SPREAD), "last evaluation",
           "tail"),
    Metric("format_rate_before", "fraction", "median", (SUMMARY,),
           "first evaluation: answers the strict rule can read", "tail"),
    Metric("format_rate_after", "fraction", "median", (SUMMARY,),
           "last evaluation: answers the strict rule can read", "tail"),
    Metric("accuracy_any_format_before", "fraction", "median", (SUMMARY,),
           "first evaluation: last number right",
           "tail"),
    Metric("accuracy_any_format_after", "fraction", "median", (SUMMARY, SPREAD),
           "last evaluation: last number right", "tail"),
    Metric("worked_rate_before", "fraction", "median", (SUMMARY,),
           "first evaluation: answers that work a step out before the answer", "tail"),
    Metric("worked_rate_after", "fraction", "median", (SUMMARY,),
           "last evaluation: answers that work a step out before the answer", "tail"),
    Metric("staleness_max", "versions", "max", (SUMMARY, COMPARE),
           "largest trained - behaviour version",
           "tail"),
    # data.split=fact only: the summary adds these columns where a run has them
    # (analysis/heldout.py)
    Metric("accuracy_heldout_gain", "pass@1", "median", (SPREAD,),
           "held-out facts: last minus first evaluation", "tail"),
    Metric("accuracy_seen_after", "pass@1", "median", (SPREAD,),
           "facts trained on: last evaluation", "tail"),
    # `rlbench check`. Performance metrics are paired per-iteration ratios (bench/check/metrics.py):
    # between two cells of one run, or (`--against`) the new tree over the old one.
    Metric("speedup:{cell}/{ref}", "x", "pooled", (CHECK,),
           "TPSPD of {cell} / TPSPD of {ref}, paired per "
           "iteration", kind="ratio", direction="higher_is_better"),
    # the same for two cells differing in one switch (a pair with the reference is its speedup row)
    *(Metric(f"{name}_gain:{{on}}/{{off}}", "x", "pooled", (CHECK,),
             f"TPSPD gain of {switch}, paired per "
             "iteration", kind="ratio", direction="higher_is_better")
      for name, switch in (("async", "schedule"), ("tri_model", "tri_model"),
                           ("shared_prompt", "shared_prompt"))),
    # the stages a switch changes: the async trainer's update and weight sync (schedule), the packed
    # update (shared_prompt), the tri-model update
    Metric("stage_cost:{stage}:{on}/{off}", "x", "pooled", (CHECK,),
           "{stage} ({stage_what}) CPU seconds of "
           "{on} / of {off} ({switch} on vs off)", kind="cost", direction="lower_is_better"),
    # pooled over the async cells, which share the queue code
    Metric("queue_cost:{cells}", "x", "pooled", (CHECK,),
           "queue path of {cell_list}: CPU seconds opening the "
           "groups taken off the queue (handoff) / CPU seconds scoring them (reward), per "
           "iteration",
           kind="cost", direction="lower_is_better"),
    Metric("overhead_share:{cell}", "fraction", "pooled", (CHECK,),
           "median share of iteration wall time "
           "outside every stage of every worker", kind="share", direction="lower_is_better"),
    # sync and periodic-async are the same updates: the same final accuracy up to floating-point
    # summation order (tolerance: bench/check/baseline.py), exactly the same iteration-0 rewards
    Metric("same_accuracy:{on}/{off}", "pass@1", "worst", (CHECK,),
           "final accuracy of {on} - of {off}: the same updates up to summation order "
           "(docs/architecture/schedules.md, 'Periodic asynchrony')",
           kind="invariant",
           direction="higher_is_better"),
    Metric("same_start:{on}/{off}", "reward", "worst", (CHECK,),
           "training reward of iteration 0 of {on} - of "
           "{off}: same weights and seeds, exactly 0", kind="invariant",
           direction="higher_is_better"),
    Metric("accuracy:{cell}", "pass@1", "mean", (CHECK,),
           "final eval pass@1 (after iteration {iteration})",
           kind="accuracy", direction="higher_is_better"),
    Metric("reward:{cell}", "reward", "mean", (CHECK,), "mean training reward, last 3 iterations",
           kind="accuracy", direction="higher_is_better"),
    # `check --against` only: the new tree over the old one, per cell and per stage
    # (bench/check/ab.py)
    Metric("tpspd:{cell}", "tokens/s/device", "each", (CHECK,),
           "TPSPD of {cell}, new / old per iteration",
           kind="ratio", direction="higher_is_better"),
    # pooled over the cells that run the stage: code every cell runs shows here, between-cell ratios
    # cancel it
    Metric("cost:{stage}", "CPU s per unit of work", "pooled", (CHECK,),
           "{stage} ({stage_what}) CPU seconds per {unit}, every cell that runs it, new / old per "
           "iteration", kind="cost",
           direction="lower_is_better"),
    # outside the measured iterations, one value per cell (or process) and tree
    # (bench/check/lifecycle.py)
    Metric("startup:{cell}", "s", "each", (CHECK,),
           "seconds from the start of {cell}'s process to its first measured iteration (imports, "
           "model build, warm start, workers, first evaluation, warm-up), less its waits for other "
           "cells' turns, new / old", kind="cost",
           direction="lower_is_better"),
    Metric("first_iteration:{cell}", "s", "each", (CHECK,),
           "seconds from the start of {cell}'s process to its first iteration, less its first "
           "evaluation and its waits for other cells' turns, new / old",
           kind="cost", direction="lower_is_better"),
    Metric("startup_cpu:{cell}", "CPU s", "each", (CHECK,),
           "CPU seconds of {cell}'s processes up to its first "
           "measured iteration, new / old", kind="cost", direction="lower_is_better"),
    Metric("eval:{cell}", "CPU s", "each", (CHECK,),
           "CPU seconds of {cell}'s processes during its evaluations (before the first iteration "
           "and after the last), new / old", kind="cost",
           direction="lower_is_better"),
    Metric("peak_rss:{cell}:{process}", "MB", "each", (CHECK,),
           "peak resident memory of {cell}'s {process} "
           "process, new / old", kind="cost", direction="lower_is_better"),
    Metric("process_cpu:{cell}:{process}", "CPU s", "each", (CHECK,),
           "CPU seconds of {cell}'s {process} process from the first measured iteration to the end "
           "of the last, inside the stages and outside them, new / old",
           kind="cost", direction="lower_is_better"),
)


def names(where: str, group: str | None = None) -> list[str]:
    """The metrics that show in `where` (and, for the summary, sit in `group`), in table order."""
    return [m.name for m in METRICS if where in m.shows and (group is None or m.group == group)]


def seed_extremes() -> dict[str, str]:
    """Metrics a multi-seed run aggregates by their min or max over seeds instead of the median."""
    return {m.name: m.seeds for m in METRICS if m.seeds in ("min", "max")}


def family(name: str) -> str:
    """A check metric's family: its name up to the first ':' (`speedup:+periodic_async/sync` ->
    speedup)."""
    return name.split(":")[0]


CHECK_FAMILIES = {family(m.name): m for m in METRICS if CHECK in m.shows}


def check_metric(family_name: str, **fields) -> tuple[str, dict]:
    """(name, {"direction", "kind", "description"}) of one check metric of a family the table
    declares, its name and description filled in with `fields` (its cells, stage ...); KeyError for
    any other family."""
    row = CHECK_FAMILIES[family_name]
    return row.name.format(**fields), {"direction": row.direction, "kind": row.kind,
                                       "description": row.what.format(**fields)}
