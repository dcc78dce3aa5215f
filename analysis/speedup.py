"""Speedups measured and predicted: every periodic-async cell against the model's prediction from
its sync twin (core/costmodel/predict.py), the attribution of a speedup to the device split and the
overlap, and validate()'s rows for every cell of a run (`rlbench simulate RUN`).
"""
from __future__ import annotations

import statistics

import pandas as pd
from rlbench.analysis import intervals
from rlbench.analysis.data import CellData, RunData
from rlbench.core import schedules
from rlbench.core.costmodel.contention import predict_contended
from rlbench.core.costmodel.predict import measurements, predict_async
from rlbench.core.costmodel.simulate import simulate
from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.core.schedules.spec import MODEL_BOUNDED, MODEL_COLOCATED, MODEL_POOLS


def speedup_frame(run: RunData) -> pd.DataFrame:
    """Measured vs predicted speedup of every periodic-async cell (core/costmodel/predict.py).

    Each is predicted from the sync cell with the same switches and workload (its own measured
    device costs); both speedups are TPSPD ratios over the cell's reference (the first cell of its
    workload). measured_speedup is the typical per-iteration ratio, the centre of its 95% interval
    measured_low / _high (analysis/intervals.py; the ratio of TPSPD medians, the summary's speedup
    column, where the iterations are too few for an interval); predicted_speedup by the same
    estimator (the predicted TPSPD of each iteration paired with the reference's measured one);
    predicted_median_ratio: the prediction as a ratio of medians, to stand beside the summary's
    speedup column (a ratio of medians too). schedule_only: no
    sync cell ran with the cell's optimisation switches (tri-model, shared-prompt attention), so the
    prediction, from a sync cell without them, is of the schedule alone: what the optimisations add
    is the measured speedup over it, and no error against the measurement is computed."""
    rows = []
    for c in run.cells:
        sync = sync_twin(run, c)
        if _model(c) != MODEL_POOLS or sync is None:  # the report predicts the pools model
            continue
        ref = reference_of(run, c)
        r, t = _split(c)
        row = {"cell": c.name, "predicted_from": sync.name,
               "schedule_only": not same_switches(sync, c),
               "overlap": _overlap(c), "rollout_devices": r, "train_devices": t,
               "rollout_share_of_sync": None, "predicted_median_ratio": None,
               "measured_speedup": schema.ratio(c.tpspd(), ref.tpspd()),
               **intervals.columns(intervals.paired(c, ref), "measured", "measured_speedup"),
               "predicted_speedup": None, "error_pct": None,
               "predicted_with_contention": None, "contention_kappa": None,
               "contention_kappa_decode": None,
               "kappa_source": None}
        # the prediction by the measured value's own estimator: paired by iteration where the
        # measurement has an interval (its value is then the typical paired ratio), else the ratio
        # of medians
        paired_ref = by_iteration(ref) if row["measured_low"] is not None else None
        try:
            pred = predict_async(sync.result, sync.samples, sync.events, r, t, overlap=_overlap(c),
                                 devices=c.devices, reference_tpspd=ref.tpspd(),
                                 reference_iterations=paired_ref)
        except UserError:
            pred = None
        if pred:
            row.update(rollout_share_of_sync=pred["rollout_share"],
                       predicted_speedup=pred["predicted_speedup"],
                       predicted_median_ratio=pred["predicted_speedup_medians"])
            if row["measured_speedup"] and pred["predicted_speedup"] and not row["schedule_only"]:
                row["error_pct"] = 100 * (pred["predicted_speedup"] / row["measured_speedup"] - 1)
            # the proposed contention term: a column beside the model, never in it
            if (r, t) == (1, 1):
                con = predict_contended(sync.result, sync.samples, sync.events, overlap=_overlap(c),
                                        devices=c.devices, reference_tpspd=ref.tpspd(),
                                        probe=run.probe,
                                        reference_iterations=paired_ref)
                k = con["kappa"]
                row.update(predicted_with_contention=con["predicted_speedup"],
                           kappa_source=con["kappa_source"],
                           contention_kappa=k[1] if isinstance(k, tuple) else k,
                           contention_kappa_decode=k[0] if isinstance(k, tuple) else None)
        rows.append(row)
    cols = ["cell", "predicted_from", "schedule_only", "overlap", "rollout_devices",
            "train_devices",
            "rollout_share_of_sync", "measured_speedup", *INTERVAL, "predicted_speedup",
            "error_pct", "predicted_median_ratio",
            "predicted_with_contention", "contention_kappa", "contention_kappa_decode",
            "kappa_source"]
    return pd.DataFrame(rows, columns=cols)


# measured_low, _high, _n, _basis
INTERVAL = list(intervals.columns(intervals.Ratio(None), "measured"))


def attribution(sp: pd.DataFrame) -> list[dict]:
    """Per workload with a barrier cell: what the device split gives (barrier / sync) and what
    overlap adds (async / barrier), measured and predicted. Speedups multiply: total = split x
    overlap."""
    out = []
    for _, b in sp[~sp["overlap"]].iterrows() if len(sp) else []:
        prefix = b["cell"].rsplit("/", 1)[0] + "/" if "/" in b["cell"] else ""
        for _, a in sp[sp["overlap"] & sp["cell"].str.startswith(prefix)].iterrows():
            if a["predicted_from"] != b["predicted_from"]:
                continue
            out.append({"async": a["cell"], "barrier": b["cell"], "sync": a["predicted_from"],
                        "rollout_share_of_sync": a["rollout_share_of_sync"],
                        "split_measured": b["measured_speedup"],
                        "split_predicted": b["predicted_speedup"],
                        "overlap_measured": schema.ratio(a["measured_speedup"],
                                                         b["measured_speedup"]),
                        "overlap_predicted": schema.ratio(a["predicted_speedup"],
                                                          b["predicted_speedup"]),
                        "total_measured": a["measured_speedup"],
                        "total_predicted": a["predicted_speedup"],
                        "total": intervals.from_columns(a, "measured_speedup", "measured")})
    return out


def colocated(c: CellData) -> bool:
    spec = schedules.get(c.schedule)
    return spec is not None and spec.colocated


def _model(c: CellData) -> str | None:
    spec = schedules.get(c.schedule)
    return spec and spec.model


def by_iteration(cell: CellData) -> dict[int, float]:
    """The cell's measured TPSPD by iteration: the reference a prediction is paired with, as the
    measured speedup pairs the cell's own iterations (intervals.paired)."""
    return {it["iteration"]: it["tpspd"] for it in cell.measured() if it.get("tpspd")}


def sync_twin(run: RunData, cell: CellData) -> CellData | None:
    """The sync cell of the same workload with the same optimisation switches, else that workload's
    first sync cell; of those, one that took turns with the cell (run.interleave_pairs' turn group)
    first."""
    syncs = [s for s in run.cells if colocated(s) and s.iterations
             and s.switches.get("workload") == cell.switches.get("workload")]
    same = [s for s in syncs if same_switches(s, cell)]
    return (_same_group(same, cell) or same or _same_group(syncs, cell) or syncs or [None])[0]


def same_switches(a: CellData, b: CellData) -> bool:
    """Whether two cells run the same optimisations (tri-model, shared-prompt attention)."""
    return all(a.switches.get(k) == b.switches.get(k) for k in ("tri_model", "shared_prompt"))


def reference_of(run: RunData, cell: CellData) -> CellData:
    """The cell a speedup is relative to: the first cell of the same turn group
    (run.interleave_pairs: the reference run beside this cell), else of the same workload (regime
    sweeps), else the first."""
    same = [c for c in run.cells if c.switches.get("workload") == cell.switches.get("workload")]
    return (_same_group(same, cell) or same or run.cells)[0]


def turn_group(c: CellData) -> str | None:
    """The turn group the cell ran in (run.interleave_pairs), or None."""
    return c.config.run.turn_group


def _same_group(cells: list[CellData], cell: CellData) -> list[CellData]:
    group = turn_group(cell)
    return [c for c in cells if group is not None and turn_group(c) == group]


def _overlap(c: CellData) -> bool:
    v = c.switches.get("overlap")
    return True if v is None else bool(v)


def _split(c: CellData) -> tuple[int, int]:
    return c.config.engine.rollout_devices, c.config.engine.train_devices


def predict_cells(run: RunData) -> list[dict]:
    """Every cell of a run predicted from the sync cell of its workload and switches (rlbench
    simulate's validation): periodic_async cells as the report's measured-vs-predicted rows, sync
    cells their own measurements replayed (in-sample), bounded cells the bounded model on their sync
    twin's costs. -> one row per cell: cell, schedule, overlap, partial_rollout, split, devices,
    measured and predicted median TPSPD, error (predicted / measured - 1), measured and predicted
    speedup, predicted_from."""
    report = speedup_frame(run).set_index("cell")
    rows = []
    for c in run.cells:
        med, ref, twin = c.tpspd(), reference_of(run, c).tpspd(), sync_twin(run, c)
        spec = schedules.get(c.schedule)
        if spec is None or not med or twin is None:
            continue
        eng = c.config.engine
        n, m = _split(c)
        devices = int(c.devices or n + m)
        pred = None
        if spec.model == MODEL_POOLS:
            sp = report.loc[c.name, "predicted_speedup"] if c.name in report.index else None
            # NaN: the report has no prediction
            pred = None if sp is None or sp != sp else float(sp) * ref
        else:
            batches = measurements(twin.result, twin.samples, twin.events)
            # in-sample: the measured ranks, each its shard
            if spec.model == MODEL_COLOCATED and twin is c:
                walls = [b.sync_time()[0] for b in batches]
                pred = statistics.median(b.tokens / (w * devices) for b, w in zip(batches, walls))
            elif spec.model == MODEL_BOUNDED:
                res = simulate(batches, c.schedule, n, m, staleness=eng.max_staleness,
                               partial_rollout=eng.partial_rollout, resume_kv=eng.resume_kv)
                pred = res.tpspd * (n + m) / devices
        if pred is None:
            continue
        rows.append({"cell": c.name, "schedule": c.schedule, "overlap": eng.overlap,
                     "partial_rollout": eng.partial_rollout,
                     "rollout_devices": n, "train_devices": m, "devices": devices,
                     "predicted_from": twin.name,
                     "measured_tpspd": med, "predicted_tpspd": pred, "error": pred / med - 1,
                     "measured_speedup": schema.ratio(med, ref),
                     "predicted_speedup": schema.ratio(pred, ref)})
    return rows
