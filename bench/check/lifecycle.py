"""What `rlbench check --against` judges outside the measured iterations: new against old, one value
per cell (or per process of a cell) and tree, read from results.json `lifecycle` and `evals`
(core/record/lifecycle.py).

- startup:<cell>: seconds from the cell process's start to its first measured iteration, less its
  waits in the turn ring; startup_cpu:<cell>: CPU seconds of its processes over the same span;
  first_iteration:<cell>: seconds to its first iteration (a warm-up one or not), less its first
  evaluation and its ring waits;
- eval:<cell>: CPU seconds of its processes during its evaluations;
- peak_rss:<cell>:<process>: peak resident memory of the cell process (driver) and of every worker;
- process_cpu:<cell>:<process>: CPU seconds of each process over the measured iterations, inside the
  stages and outside them (driver work, or work moved out of a timed stage, shows here).

One value per tree has no within-run spread to judge it by, so each family is judged against a floor
set from its measured noise: the spread of log(new / old) over unchanged A/B runs (FLOORS;
bench/baselines/README.md). A metric only the new tree measures is reported and not judged (the
accepted commit predates it); it is judged once ACCEPTED moves past the commit that added it. One
the old tree has and the new one lacks fails.
"""
from __future__ import annotations

import math
from pathlib import Path

from rlbench.check.metrics import read_cells
from rlbench.core import schedules
from rlbench.core.results.metric_table import check_metric, family
from rlbench.core.schedules.spec import REFERENCE

# family -> flag line: the smallest change judged a regression (or an improvement), relative. Set
# from the noise measured on unchanged A/B runs of configs/ci-ab.yaml: bench/baselines/README.md.
# docs/results/ci-gate.md, 'Floors from measured noise' shows the runs behind each (and what they
# catch).
FLOORS = {"startup": 0.25, "startup_cpu": 0.06, "eval": 0.50, "peak_rss": 0.05, "process_cpu": 0.08,
          "first_iteration": 0.25}  # start-up's floor until unchanged runs measure its own noise
# The first cell's start-up has its own: its two sides set up one after the other (the first fills
# the model cache alone, bench/run/interleave.py), the old side's while the other cells' processes
# are still importing, so its wall time, and on a busy machine its CPU seconds, move with what else
# runs, where the other cells' two sides set up side by side. The same for its time to the first
# iteration (it also builds the run's weight file, engines/model/weight_file.py).
FIRST_CELL_FLOORS = {"startup": 0.50, "startup_cpu": 0.25, "first_iteration": 0.50}
# A cell whose rollout overlaps its training (an asynchronous schedule) has its own start-up CPU
# floor: its start-up span holds its warm-up iterations, and the first warm-up round runs the new
# tree's cell right after the old tree's same cell, whose rollout producer may still run. Measured
# on four A/Bs of unchanged code (2-core AMD EPYC, 2026-12-08): periodic-async's start-up CPU +8.4%,
# +10.8%, +9.8%, -0.4%, where the cells that train synchronously moved -4% to +5%.
OVERLAPPED_FLOORS = {"startup_cpu": 0.15}


# Evaluation pooled over the cells (eval:all): the evaluation code is every cell's, and one cell's
# evaluation CPU seconds vary most of all these metrics (each is short, and the first runs while the
# other tree sets up); their sum over the cells varies about half as much, so a smaller change of
# the shared code shows there.
POOLED_EVAL = "eval:all"
POOLED_EVAL_FLOOR = 0.12


def floor(name: str, m: dict) -> float:
    """The flag line of one metric (an entry of paired below)."""
    if m.get("first_cell"):
        return FIRST_CELL_FLOORS[family(name)]
    if m.get("overlapped"):
        return OVERLAPPED_FLOORS[family(name)]
    if name == POOLED_EVAL:
        return POOLED_EVAL_FLOOR
    return FLOORS[family(name)]


def cell_values(run_dir: Path) -> tuple[dict[str, float], set[str]]:
    """({metric name: value}, metrics that measured a cold model cache) of every cell of a run
    folder, for the families in FLOORS; a value the run did not record is left out. A cell that
    warm-started its model (no cached one: the first run of a model on a machine) spent its
    start-up, and its cell process's peak memory, filling the cache: a one-time cost, not what the
    next run will pay, so not compared."""
    _, cells = read_cells(run_dir)
    out, cold = {}, set()
    for cell, res in cells.items():
        if res.get("status") == "missing":
            continue
        if (res.get("model") or {}).get("cached") is False:
            cold |= {check_metric(f, cell=cell, process="driver")[0]
                     for f in ("startup", "startup_cpu", "peak_rss", "first_iteration")}
        life = res.get("lifecycle") or {}
        for name, value in (("startup", life.get("startup_s")),
                            ("startup_cpu", life.get("startup_cpu_s")),
                            ("eval", _eval_cpu(res)),
                            ("first_iteration", life.get("first_iteration_s"))):
            if value is not None:
                out[check_metric(name, cell=cell)[0]] = float(value)
        for name, key in (("peak_rss", "peak_rss_mb"), ("process_cpu", "process_cpu_s")):
            for proc, value in (life.get(key) or {}).items():
                out[check_metric(name, cell=cell, process=proc)[0]] = float(value)
    return out, cold


def _eval_cpu(res: dict) -> float | None:
    """CPU seconds of the cell's processes during its evaluations. Not their wall time: the first
    evaluation runs while the other tree sets up the same cell, and its wall time varied by more
    than 2x between unchanged runs (bench/baselines/README.md); its work did not."""
    cpu = [e.get("cpu_s") for e in res.get("evals") or []]
    return sum(cpu) if cpu and None not in cpu else None


def paired(old_dir: Path, new_dir: Path) -> dict[str, dict]:
    """{metric: entry} as bench/check/ab.py's paired_metrics, one log-ratio per metric (judged
    against its floor: judge_scalar); "why": the reason a metric both trees measured is not
    compared; "first_cell": the start-up (seconds, CPU seconds) and time to the first iteration of
    the ring's first cell (FIRST_CELL_FLOORS); "overlapped": the start-up CPU of a cell whose
    rollout overlaps its training (OVERLAPPED_FLOORS)."""
    (old, cold_old), (new, cold_new) = cell_values(old_dir), cell_values(new_dir)
    new_cells = read_cells(new_dir)[1]
    seat = next(iter(new_cells), "")  # the ring's first seat
    first = {check_metric(f, cell=seat)[0] for f in FIRST_CELL_FLOORS}
    overlapped = {check_metric(f, cell=cell)[0] for cell, res in new_cells.items()
                  if _overlaps(res) for f in OVERLAPPED_FLOORS}
    _pool_eval(old, new)
    out = {}
    for name in dict.fromkeys([*old, *new]):
        declared = check_metric(family(name), **_fields(name))[1]
        if name == POOLED_EVAL:
            declared = {**declared,
                        "description": "CPU seconds of every cell's processes during their "
                                                   "evaluations, summed over the cells both trees "
                                                   "ran, new / old"}
        o, n = old.get(name), new.get(name)
        cold = [side for side, names in (("old", cold_old), ("new", cold_new)) if name in names]
        both = o is not None and n is not None and o > 0 and n > 0 and not cold
        out[name] = {**declared, "old": o, "new": n, "keys": [name] if both else None,
                     "log_ratios": [math.log(n / o)] if both else None,
                     "why": f"the {' and '.join(cold)} tree warm-started the model (a cold cache): "
                            "a one-time cost, not compared" if cold else None,
                     "first_cell": name in first, "overlapped": name in overlapped}
    return out


def _overlaps(res: dict) -> bool:
    """The cell's schedule overlaps rollout with training (any but the reference schedule)."""
    spec = schedules.get((res.get("switches") or {}).get("schedule"))
    return spec is not None and spec.role != REFERENCE


def _pool_eval(old: dict, new: dict) -> None:
    """Add eval:all to both trees' values: the sum of eval:<cell> over the cells both measured."""
    cells = [n for n in old if family(n) == "eval" and n in new]
    if cells:
        old[POOLED_EVAL], new[POOLED_EVAL] = sum(old[n] for n in cells), sum(new[n] for n in cells)


def _fields(name: str) -> dict:
    """The fields a metric name was made from: `peak_rss:sync:driver` -> {cell: sync, process:
    driver}."""
    _, cell, *process = name.split(":")
    return {"cell": cell, "process": ":".join(process)}


def judge_scalar(x: float, direction: str, floor: float) -> tuple[str, None, str, float]:
    """(mark, no interval, note, change) of one log-ratio new/old: beyond the floor in the bad
    direction is worse."""
    note = (f"one value per tree: flagged beyond {floor:+.0%} (its floor, from unchanged A/B runs' "
            f"noise)")
    if abs(x) <= math.log1p(floor):
        return "not significant", None, note.replace("flagged", "within; flagged"), math.expm1(x)
    bad = x < 0 if direction == "higher_is_better" else x > 0
    return ("worse" if bad else "better"), None, note, math.expm1(x)
