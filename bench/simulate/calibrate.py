"""Calibrate the model from a measured run, and check it against the run's own cells.

Everything comes from the *sync* cell (results.json iterations, rollout_stats, samples.jsonl):

- decode step = a + b * (sequences in flight): over the measured iterations, rollout seconds
  = a * decode_steps + b * sum over steps of in-flight sequences (= decode_steps * mean_active),
  solved by least squares when there are >= 3 iterations, their mean occupancy differs by >= 20 %
  and a, b >= 0; otherwise b = 0 and a = rollout seconds / decode steps (documented in the notes:
  a constant step cost, memory-bound decode). Without rollout_stats the steps are replayed from
  the samples' lengths through continuous batching (events.instance with a unit step).
- training: (reward + advantage + old/ref log-probs + update seconds) / (prompt + response tokens);
  optimizer step, weight sync and the untimed remainder of the wall time: means per iteration
  (stage times through rlbench.reports.predict.stage_times).
- devices: the sync cell ran on rollout_devices + train_devices, its rollout as one instance on all
  of them and its training on all of them, so both reference device counts are that number.
- scaling (not measurable from one sync cell, hence assumptions): on CPU a "device" is a core and
  a pool is one process using its cores as intra-op threads; tiny models gain little from threads,
  so rollout_exponent = train_exponent = 0.5 (between none, 0, and linear, 1); on accelerators 1.
  validate() simulates the run as it ran (one process per pool). At scale a pool is made of
  replicas of the measured unit: rollout instances of `devices` devices each (throughput
  proportional to their count) and data-parallel training with dp_exponent 0.95 (model.py).
"""
from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from rlbench import schema
from rlbench.errors import UserError
from rlbench.simulate.events import instance, simulate
from rlbench.simulate.model import Calibration, Workload

CPU_EXPONENT = 0.5
ACCEL_EXPONENT = 1.0


def _schedule(cell: dict) -> str:
    return (cell.get("switches") or {}).get("schedule") or \
        ((cell.get("config") or {}).get("engine") or {}).get("schedule", "?")


def find_sync_cell(cells: list[dict], run_dir: Path) -> dict:
    for c in cells:
        if _schedule(c) == "sync" and c.get("iterations"):
            return c
    found = ", ".join(f"{c.get('cell')} ({_schedule(c)})" for c in cells) or "none"
    raise UserError(f"{run_dir}: no sync cell with measured iterations to calibrate from (cells: {found}); "
                    "run e.g. `rlbench run --ablation async` first")


def load_cells(run_dir: Path) -> list[dict]:
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise UserError(f"{run_dir}: run folder not found")
    return schema.load_run(run_dir)


def _measured(cell: dict) -> list[dict]:
    return schema.measured(cell.get("iterations") or [])


def _decode_points(cell: dict, samples: list[dict], its: list[dict], slots: int) -> list[tuple]:
    """[(rollout s, decode steps, in-flight sequence-steps)] per measured iteration."""
    from rlbench.reports.predict import stage_times

    stats = {s["iteration"]: s.get("workers") or [] for s in cell.get("rollout_stats") or []}
    have = {int(s["iteration"]) for s in samples}
    points = []
    for it in its:
        roll = stage_times(it)["roll"]
        ws = [w for w in stats.get(it["iteration"], []) if w and w.get("decode_steps")]
        if ws:
            steps = sum(w["decode_steps"] for w in ws)
            active = sum(w["decode_steps"] * w["mean_active"] for w in ws)
        elif it["iteration"] in have:  # no stats: replay the lengths with a unit step cost
            batch = Workload.from_samples(samples, [it["iteration"]]).batches[0]
            lens = [x for _, r in batch for x in r]
            _, steps, active = instance(lens, slots, lambda b: 1.0, 0.0)
        else:
            continue
        if roll > 0 and steps > 0:
            points.append((roll, steps, active))
    return points


def fit_decode(points: list[tuple]) -> tuple[float, float, str]:
    """(a, b, how) for step seconds = a + b * in-flight sequences (module docstring)."""
    if not points:
        raise UserError("the sync cell has no rollout time to calibrate the decode step from")
    roll = np.array([p[0] for p in points])
    x = np.array([[p[1], p[2]] for p in points], dtype=float)
    occ = x[:, 1] / x[:, 0]
    if len(points) >= 3 and np.ptp(occ) >= 0.2 * occ.mean():
        (a, b), *_ = np.linalg.lstsq(x, roll, rcond=None)
        if a >= 0 and b >= 0:
            return float(a), float(b), f"least squares over {len(points)} iterations"
    a = float(roll.sum() / x[:, 0].sum())
    return a, 0.0, (f"{len(points)} iteration(s) with similar occupancy: assumed a constant step "
                    f"cost (b = 0, memory-bound decode), a = rollout s / decode steps")


def calibrate(run_dir: Path, rollout_exponent: float | None = None,
              train_exponent: float | None = None) -> tuple[Calibration, Workload]:
    """Calibration + measured workload from the sync cell of a cell or ablation folder."""
    from rlbench.reports.predict import stage_times

    run_dir = Path(run_dir)
    cell = find_sync_cell(load_cells(run_dir), run_dir)
    its = _measured(cell)
    cfg = cell.get("config") or {}
    slots = int((cfg.get("rollout") or {}).get("max_num_seqs") or 32)
    devices = int(its[0].get("devices") or 1)
    samples = schema.load_samples(Path(cell["_dir"]))
    if not samples:
        raise UserError(f"{cell['_dir']}: no samples.jsonl rows (response lengths) to calibrate from")
    a, b, how = fit_decode(_decode_points(cell, samples, its, slots))
    st = [stage_times(it) for it in its]
    tokens = sum(it["tokens"] for it in its)
    kind = str((cfg.get("engine") or {}).get("device") or (cell.get("provenance") or {}).get(
        "device", {}).get("type", "cpu"))
    default_exp = CPU_EXPONENT if kind == "cpu" else ACCEL_EXPONENT
    given = rollout_exponent is not None or train_exponent is not None
    measured = {it["iteration"] for it in its}
    wl = Workload.from_samples(samples, sorted(measured))
    cal = Calibration(
        source=str(run_dir), device=kind, max_num_seqs=slots, instance_devices=devices,
        decode_a_s=a, decode_b_s=b, train_ref_devices=devices,
        train_s_per_token=sum(s["train"] for s in st) / max(tokens, 1),
        optimizer_step_s=statistics.fmean(s["opt"] for s in st),
        weight_sync_s=statistics.fmean(s["ws"] for s in st),
        overhead_s=statistics.fmean(s["other"] for s in st),
        rollout_exponent=default_exp if rollout_exponent is None else rollout_exponent,
        train_exponent=default_exp if train_exponent is None else train_exponent,
        tp=devices,
        notes=[f"cell {cell.get('cell')!r}, iterations {sorted(measured)} (warm-up excluded)",
               f"decode fit: {how}",
               f"scaling exponents: {'CPU threads of one process' if kind == 'cpu' else 'accelerators'}"
               f" ({'given' if given else 'assumed'}); rollout instances at scale: one per {devices} device(s),"
               " as measured"])
    return cal, wl


def validate(run_dir: Path, rollout_exponent: float | None = None,
             train_exponent: float | None = None) -> list[dict]:
    """Predict every measured cell of the run from the sync cell's calibration.

    -> one row per cell: cell, schedule, split, measured and predicted median TPSPD, error
    (predicted / measured - 1). Each cell is simulated with its own device split
    (config.engine.rollout_devices / train_devices) and, as on the real machine, one rollout
    instance per pool (tp=None). Cells of schedules the model does not know are skipped.
    """
    cal, wl = calibrate(run_dir, rollout_exponent, train_exponent)
    rows = []
    for cell in load_cells(Path(run_dir)):
        sched = _schedule(cell)
        med = ((cell.get("aggregates") or {}).get("tpspd") or {}).get("median")
        if sched not in ("sync", "periodic_async", "bounded_async") or not med:
            continue
        eng = (cell.get("config") or {}).get("engine") or {}
        n, m = int(eng.get("rollout_devices", 1)), int(eng.get("train_devices", 1))
        k = int(eng.get("staleness", eng.get("max_staleness", 1)) or 0)
        res = simulate(cal, wl, sched, n, m, staleness=k, tp=None,
                       shared_prompt=bool(eng.get("shared_prompt")))
        rows.append({"cell": cell.get("cell"), "schedule": sched, "rollout_devices": n,
                     "train_devices": m, "measured_tpspd": med, "predicted_tpspd": res.tpspd,
                     "error": res.tpspd / med - 1, "predicted_idle": res.idle,
                     "measured_idle": _pool_idle((cell.get("aggregates") or {}).get("idle_frac", {}))})
    sync = next((r for r in rows if r["schedule"] == "sync"), None)
    for r in rows:  # speedups vs the sync cell, measured and predicted
        r["measured_speedup"] = r["measured_tpspd"] / sync["measured_tpspd"] if sync else None
        r["predicted_speedup"] = r["predicted_tpspd"] / sync["predicted_tpspd"] if sync else None
    return rows


def _pool_idle(workers: dict) -> dict:
    """Measured idle share per worker (colocated, trainer, rollout0, ...) -> per pool, as predicted."""
    pools: dict[str, list[float]] = {}
    for w, v in workers.items():
        pool = "train" if w.startswith("train") else "rollout" if w.startswith("rollout") else w
        pools.setdefault(pool, []).append(v)
    return {k: statistics.fmean(v) for k, v in pools.items()}
