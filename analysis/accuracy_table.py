"""The time-to-accuracy table (accuracy.csv): one row per cell, aggregated over its seeds.

Columns: TPSPD (median over seeds of each seed's median, with the spread over seeds); accuracy
(strict pass@1) and accuracy in any format at the first and the last evaluation, the last with a 95%
interval (analysis/accuracy.py says which); the target (median of the per-seed targets) and, per
cell, how many of the seeds with a target reached theirs, the training wall
time and trained samples to reach it (median over the seeds that did, with the spread), the
reference's time over this cell's (> 1: reaches the target sooner); total training wall time; and
the share of GRPO groups with non-zero reward variance (the only groups that produce a gradient)
over the first and the last quarter of the iterations: why accuracy moves, or stops moving.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

import pandas as pd

from rlbench.core.results import schema
from rlbench.analysis.accuracy import (
    Curve,
    crossing,
    curves,
    interval,
    t_interval,
    target_accuracy,
    typical_target,
)
from rlbench.analysis.data import CellData, RunData

COLUMNS = ["cell", "seeds", "tpspd_median", "tpspd_seed_min", "tpspd_seed_max", "accuracy_first",
           "accuracy_final", "accuracy_final_lo", "accuracy_final_hi", "any_format_first",
           "any_format_final",
           "any_format_final_lo", "any_format_final_hi", "interval", "target", "reached",
           "time_to_target_s",
           "time_to_target_s_min", "time_to_target_s_max", "samples_to_target",
           "time_ratio_vs_reference",
           "train_wall_s", "mixed_groups_first", "mixed_groups_last", "gain", "gain_lo", "gain_hi",
           "time_to_target_s_mean", "time_to_target_s_lo", "time_to_target_s_hi", "seen_first",
           "seen_final",
           "eval_split"]


def accuracy_frame(run: RunData) -> pd.DataFrame:
    """One row per cell with at least one evaluation; the reference cell first."""
    all_curves = curves(run)
    reference = schema.split_seeded(run.reference)[0]
    targets = target_accuracy(all_curves, reference)
    cells = _cells_by_name(run)
    rows = [_row(name, cvs, cells.get(name, []), targets) for name, cvs in all_curves.items()]
    ref_time = next((r["time_to_target_s"] for r in rows if r["cell"] == reference), None)
    for r in rows:
        t = r["time_to_target_s"]
        r["time_ratio_vs_reference"] = ref_time / t if ref_time is not None and t else None
    return pd.DataFrame(rows, columns=COLUMNS)


def _cells_by_name(run: RunData) -> dict[str, list[CellData]]:
    out: dict[str, list[CellData]] = defaultdict(list)
    for c in run.cells:
        out[schema.split_seeded(c.name)[0]].append(c)
    return out


def _row(name: str, cvs: list[Curve], cells: list[CellData], targets: dict) -> dict:
    tp = [c.tpspd() for c in cells if c.tpspd() is not None]
    finals = [cv.accuracy[-1] for cv in cvs]
    acc, lo, hi, method = interval(finals, cvs[0].n_eval)
    anys = [cv.any_format[-1] for cv in cvs if cv.any_format[-1] is not None]
    any_m, any_lo, any_hi, _ = interval(anys, cvs[0].n_eval) if anys else (None, None, None, None)
    aimed = [cv for cv in cvs if cv.seed in targets]  # seeds with a target
    times = [t for t in (crossing(cv, targets[cv.seed]) for cv in aimed) if t is not None]
    samples = [s for s in (crossing(cv, targets[cv.seed],
                                    "samples") for cv in aimed) if s is not None]
    mixed = [mixed_group_shares(c) for c in cells]
    gains = [cv.accuracy[-1] - cv.accuracy[0] for cv in cvs]
    gain = t_interval(gains) or (gains[0], None, None)
    time_ci = t_interval(times) or (None,) * 3
    seen = [cv for cv in cvs if cv.seen and cv.seen[0] is not None]
    return {**dict(zip(["gain", "gain_lo", "gain_hi"], gain)),
            **dict(zip(["time_to_target_s_mean", "time_to_target_s_lo", "time_to_target_s_hi"],
                       time_ci)),
            "seen_first": _median(cv.seen[0] for cv in seen),
            "seen_final": _median(cv.seen[-1] for cv in seen),
            "eval_split": "fact" if seen else "text",
            "cell": name, "seeds": len(cvs), "tpspd_median": _median(tp),
            "tpspd_seed_min": min(tp, default=None),
            "tpspd_seed_max": max(tp, default=None),
            "accuracy_first": _median(cv.accuracy[0] for cv in cvs), "accuracy_final": acc,
            "accuracy_final_lo": lo, "accuracy_final_hi": hi,
            "any_format_first": _median(cv.any_format[0] for cv in cvs), "any_format_final": any_m,
            "any_format_final_lo": any_lo, "any_format_final_hi": any_hi, "interval": method,
            "target": typical_target(targets), "reached": f"{len(times)}/{len(aimed)}",
            "time_to_target_s": _median(times),
            "time_to_target_s_min": min(times, default=None),
            "time_to_target_s_max": max(times, default=None),
            "samples_to_target": _median(samples),
            "train_wall_s": _median(cv.wall_s[-1] for cv in cvs),
            "mixed_groups_first": _median(m[0] for m in mixed),
            "mixed_groups_last": _median(m[1] for m in mixed)}


def mixed_group_shares(c: CellData) -> tuple[float | None, float | None]:
    """Share of groups (iteration, prompt) whose rewards are not all equal, over the first and the
    last quarter of the cell's iterations (at least one iteration each)."""
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for s in c.samples:
        groups[(s["iteration"], s["prompt"])].append(s["reward"])
    iters = sorted({k for k, _ in groups})
    if not iters:
        return None, None
    q = max(1, len(iters) // 4)

    def share(ks) -> float:
        gs = [rs for (k, _), rs in groups.items() if k in ks]
        return sum(max(rs) > min(rs) for rs in gs) / len(gs)

    return share(set(iters[:q])), share(set(iters[-q:]))


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def write_accuracy_table(run: RunData) -> pd.DataFrame:
    """accuracy.csv in the run folder (only when some cell has evaluations); returns the table."""
    df = accuracy_frame(run)
    if len(df):
        df.to_csv(run.path / "accuracy.csv", index=False)
    return df
