"""The rollout term of the cost model against what the runs measured, and the speedups with the decode step
priced by its shape (bucket, window) against priced by the sequences in flight alone, on the same files.

    .venv/bin/python scripts/rollout_model_check.py RUN_DIR [RUN_DIR ...] [--csv OUT.csv]

(scripts/panel.sh runs it over the panel's run folders OUT/<workload>/run<N>/<id>.)

For every run folder with a sync cell that recorded step shapes (engines/rollout/step_costs.py):
- in sample: per sync iteration and rank, the replay of the rank's own samples with the iteration's step
  costs against the sum of the step and refill seconds the rank recorded (the model's rollout term when
  the shapes are right);
- out of sample: per periodic-async cell and iteration, the replay of the whole batch on its rollout
  worker(s) with the sync iteration's costs against the seconds the rollout worker recorded (steps +
  refills) and its rollout stage's wall seconds;
- the speedup of every periodic-async cell: measured (the verdict's paired value) and predicted by the
  model, and by the model with one or both of its latest changes taken back: the decode step priced by its
  sequences in flight instead of its shape, and the predicted speedup as a ratio of medians instead of the
  measured speedup's paired estimator ("before" is both), and the contention column.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from unittest import mock

from rlbench.analysis import data
from rlbench.analysis import speedup
from rlbench.analysis.speedup import speedup_frame, sync_twin
from rlbench.core.costmodel import predict
from rlbench.core.costmodel.decode import replay
from rlbench.core.record.stages import Stage


def recorded_s(stats: dict) -> float:
    """Seconds a generate call recorded: its decode steps and refills."""
    return sum(s for _, s in (stats.get("step_s_by_active") or {}).values()) + (stats.get("refill_s") or 0.0)


def rollout_rows(run: data.RunData) -> list[dict]:
    rows = []
    for c in run.cells:
        sync = sync_twin(run, c)
        if sync is None:
            continue
        by_it = {m.samples[0]["iteration"]: m for m in predict.measurements(sync.result, sync.samples, sync.events)
                 if m.samples}
        stats = {r["iteration"]: r.get("workers") or [] for r in c.result.get("rollout_stats") or []}
        walls = defaultdict(float)
        for e in c.events:
            if e["stage"] == Stage.ROLLOUT.value and "rollout" in e["worker"]:
                walls[e["iteration"]] += e["end"] - e["start"]
        for k, m in sorted(by_it.items()):
            if m.cost.shapes is None or k not in stats:
                continue
            workers = stats[k]
            n = len(workers)
            if c is sync:  # in sample: each rank's own shard
                for r, w in enumerate(workers):
                    pred = replay(m.shard(r, n), m.slots, m.g, m.cost)[1]
                    rows.append({"cell": c.name, "iteration": k, "worker": r, "kind": "in sample",
                                 "recorded_s": recorded_s(w), "predicted_s": pred, "wall_s": None})
            else:
                pred = max(replay(m.shard(r, n), m.slots, m.g, m.cost)[1] for r in range(n))
                rows.append({"cell": c.name, "iteration": k, "worker": "all", "kind": "async worker",
                             "recorded_s": max(recorded_s(w) for w in workers), "predicted_s": pred,
                             "wall_s": walls.get(k) / max(1, n) if k in walls else None})
    return rows


def speedups(run: data.RunData) -> list[dict]:
    """Per cell: measured, the model's prediction, and the prediction with the decode step priced by its
    sequences in flight (by_active), with the ratio of medians as the estimator (by_medians), with both
    (before: the model as it was before step shapes and the paired estimator), and the contention column."""
    no_shapes = mock.patch.object(predict, "shape_cost", lambda stats: None)
    no_pairs = mock.patch.object(speedup, "by_iteration", lambda cell: None)
    frames = {"by_shape": speedup_frame(run)}
    with no_shapes:
        frames["by_active"] = speedup_frame(run)
    with no_pairs:
        frames["by_medians"] = speedup_frame(run)
    with no_shapes, no_pairs:
        frames["before"] = speedup_frame(run)
    out = []
    for i, a in frames["by_shape"].iterrows():
        m = a["measured_speedup"]
        row = {"cell": a["cell"], "measured": m, "with_contention": a["predicted_with_contention"]}
        for name, frame in frames.items():
            p = frame["predicted_speedup"][i]
            row[name] = p
            row[f"error_{name}_pct"] = 100 * (p / m - 1) if m and p and p == p else None
        out.append(row)
    return out


def where(path: str) -> tuple[str, str]:
    """(workload, run) of a panel's run folder OUT/<workload>/run<N>/<id>; else (the folder, "")."""
    p = Path(path).resolve()
    if p.parent.name.startswith("run") and p.parent.name[3:].isdigit():
        return p.parent.parent.name, p.parent.name
    return str(path), ""


VARIANTS = (("by_shape", "the model"), ("before", "before (by sequences in flight, ratio of medians)"),
            ("by_active", "decode by sequences in flight"), ("by_medians", "ratio of medians"),
            ("contention", "with the contention column"))


def summary(rows: list[dict]) -> list[str]:
    """Median and largest |error| of each variant, cells within 10%, and per workload and cell the spread
    of the measured speedup over the runs."""
    out = []
    for r in rows:
        c, m = r.get("with_contention"), r["measured"]
        r["error_contention_pct"] = 100 * (c / m - 1) if m and c is not None and c == c else None
    for key, name in VARIANTS:
        errs = [abs(r[f"error_{key}_pct"]) for r in rows if r[f"error_{key}_pct"] is not None]
        if errs:
            out.append(f"{name}: median |error| {statistics.median(errs):.1f}%, largest {max(errs):.1f}%, "
                       f"within 10%: {sum(e <= 10 for e in errs)}/{len(errs)}")
    pairs = [(abs(r["error_contention_pct"]), abs(r["error_by_shape_pct"])) for r in rows
             if r["error_contention_pct"] is not None and r["error_by_shape_pct"] is not None]
    if pairs:
        out.append(f"the contention column further from the measured speedup than the model in "
                   f"{sum(c > m for c, m in pairs)} of {len(pairs)} cells")
    by_cell = defaultdict(list)
    for r in rows:
        by_cell[(r["workload"], r["cell"])].append(r["measured"])
    for (workload, cell), ms in sorted(by_cell.items()):
        ms = [m for m in ms if m]
        if len(ms) > 1:
            out.append(f"spread {workload} {cell}: {min(ms):.3f}–{max(ms):.3f}× over {len(ms)} runs")
    return out


def markdown(rows: list[dict]) -> list[str]:
    """One row per workload and cell: each run's measured speedup, the model's prediction and its error,
    and the largest error of each variant over the runs."""
    by_cell = defaultdict(list)
    for r in rows:
        by_cell[(r["workload"], r["cell"])].append(r)
    x = lambda v: "–" if v is None or v != v else f"{v:.2f}×"  # noqa: E731
    pct = lambda v: "–" if v is None else f"{v:+.1f}%"  # noqa: E731
    out = ["| workload | cell | runs | measured, each run | predicted (error), each run | largest error: "
           + " / ".join(name for _, name in VARIANTS) + " |", "|---|---|---|---|---|---|"]
    for (workload, cell), rs in by_cell.items():
        measured = ", ".join(x(r["measured"]) for r in rs)
        predicted = ", ".join(f"{x(r['by_shape'])} ({pct(r['error_by_shape_pct'])})" for r in rs)
        largest = []
        for key, _ in VARIANTS:
            errs = [abs(r[f"error_{key}_pct"]) for r in rs if r.get(f"error_{key}_pct") is not None]
            largest.append(f"{max(errs):.1f}%" if errs else "–")
        out.append(f"| {workload} | {cell} | {len(rs)} | {measured} | {predicted} | {' / '.join(largest)} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--markdown", action="store_true", help="print the per-cell table in Markdown at the end")
    ap.add_argument("--csv", help="write the speedup rows here (workload, run, cell, measured, each variant's "
                                  "prediction and error)")
    args = ap.parse_args(argv)
    all_speedups = []
    fmt = lambda v: "–" if v is None or v != v else f"{v:.3f}×"  # noqa: E731
    pct = lambda v: "–" if v is None else f"{v:+.1f}%"  # noqa: E731
    for path in args.runs:
        run = data.load(path)
        print(f"\n{path}")
        rows = rollout_rows(run)
        for kind in ("in sample", "async worker"):
            mine = [r for r in rows if r["kind"] == kind]
            if not mine:
                continue
            err = [100 * (r["predicted_s"] / r["recorded_s"] - 1) for r in mine if r["recorded_s"]]
            total = 100 * (sum(r["predicted_s"] for r in mine) / sum(r["recorded_s"] for r in mine) - 1)
            print(f"  rollout, {kind}: {len(mine)} rows, predicted / recorded - 1: all rows {total:+.1f}%, per row "
                  f"median {statistics.median(err):+.1f}%, range {min(err):+.1f}% .. {max(err):+.1f}%")
            walls = [100 * (r["recorded_s"] / r["wall_s"] - 1) for r in mine if r["wall_s"]]
            if walls:
                print(f"    recorded / rollout stage wall - 1: median {statistics.median(walls):+.1f}%")
        workload, label = where(path)
        for sp in speedups(run):
            sp.update(workload=workload, run=label)
            all_speedups.append(sp)
            print(f"  {sp['cell']:<28} measured {fmt(sp['measured'])}  model {fmt(sp['by_shape'])} "
                  f"({pct(sp['error_by_shape_pct'])})  before {fmt(sp['before'])} ({pct(sp['error_before_pct'])})  "
                  f"decode by sequences in flight {pct(sp['error_by_active_pct'])}  ratio of medians "
                  f"{pct(sp['error_by_medians_pct'])}  with contention {fmt(sp['with_contention'])}")
    if all_speedups:
        print("\n" + "\n".join(summary(all_speedups)))
        if args.markdown:
            print("\n" + "\n".join(markdown(all_speedups)))
    if args.csv and all_speedups:
        keys = [k for k, _ in VARIANTS[:-1]]
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, ["workload", "run", "cell", "measured", *keys, "with_contention",
                                   *(f"error_{k}_pct" for k, _ in VARIANTS)], extrasaction="ignore")
            w.writeheader()
            w.writerows(all_speedups)
    return 0


if __name__ == "__main__":
    sys.exit(main())
