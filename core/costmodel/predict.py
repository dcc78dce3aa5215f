"""Predicted periodic-async time per iteration from a sync run's measured quantities
(docs/architecture/cost-model.md).

Pure Python over result files (results.json, events.jsonl, samples.jsonl); no engine code; one thing
fitted: the decode step's seconds as a plane over its shape (bucket, window), to price shapes the
sync run did not run. Under the fair layout (core/devices/placement.py) every worker is one process
on one device, in both schedules, so a device's costs measured in the sync run carry over to the
async one:

1. Rollout: the sampler records, per generate call, the seconds of each decode step by the shape it
   ran at (bucket rows and the cache window its slots reach, engines/rollout/step_costs.py) and of
   each refill (retire finished samples, prefill and admit new ones). A rollout worker is replayed
   through continuous batching (max_num_seqs slots, prompts in dispatch order, G samples each, a
   finished slot refilled at once) with the iteration's measured response and prompt lengths, step
   by step (decode.py): a step costs the plane fitted over the iteration's measured shapes at its
   own bucket and window (exactly the measured seconds in sum over the measured steps; a larger
   bucket or another window along the same plane). Sync rank r gets prompts r, r+N, ...; async
   rollout worker i gets prompts i, i+R, ... (the same sample seeds, so the same responses). A group
   arrives when its last sample finishes. Results without the shape table (older runs, vLLM) price a
   step by its sequences in flight (linear between measured counts; above the largest, along the
   line through the upper half of them).
2. Training: seconds per unit of executed training work (reward + log-probs + advantage + update,
   summed over the sync ranks, divided by their work). The work is what the trainer runs, padding
   included (`train_work`): each micro-batch of a group is one [rows, longest] batch (or, with
   shared-prompt packing, one sequence: the prompt once, then every response), counted as forward
   FLOPs, 2 N per position plus attention 4 L H Dh S^2 per sequence (core/results/utilisation.py's
   count, with the model's shape from results.json); so a group with one long response costs what
   its padded batch costs, not what its real tokens would. Optimizer step (with the all-reduce) and
   weight sync: the sync ranks' measured means. The async weight sync is a publish by trainer rank 0
   into shared host memory, then a load by each rollout worker: two crossings of the weights' bytes.
   On a CPU each is the same memory copy a sync rank's weight sync makes (its measured seconds); on
   an accelerator they cross to the host and back, which a colocated rank's on-device copy never
   does, so each costs the weights' bytes over the device's measured host-copy bandwidth
   (core/devices/peak.py; the sync rank's seconds where the results predate that probe).
3. Async: groups in arrival order are dealt to the T trainer ranks (j-th to rank j mod T); a rank
   trains a group when it has arrived and the rank is free. T = ws_publish + ws_load + (last rank
   done) + optimizer step. Barrier (engine.overlap=false): the ranks start when the last group has
   arrived. Sync (in-sample check of the model): ws + max over ranks (rollout + train) + step.
4. Predicted TPSPD = iteration tokens / (T x devices) per measured iteration; predicted speedup by
   the measured speedup's own estimator: paired with the reference cell's measured TPSPD iteration
   by iteration, exp of the trimmed mean of the log-ratios (predicted_speedup), or the ratio of the
   medians where the measurement has none.
5. Bounded staleness and partial rollout (rlbench simulate's bounded and partial models) run on the
   same costs; partial rollout's recompute (a prefill of every sequence in flight) costs the
   refills' seconds per prompt token they prefilled (an upper bound: a refill also admits and
   retires samples).
"""
from __future__ import annotations

import functools
import math
import statistics
from collections import defaultdict

from rlbench.core.config_files import recorded_config
from rlbench.core.costmodel.sync_measurements import (SyncMeasurements, durations,
                                                     split_weight_sync_s)
from rlbench.core.errors import UserError

MODEL = ("per device, from the sync run: decode-step seconds by the step's bucket and cache window "
         "(a plane over the measured shapes) and refill seconds (continuous-batching replay of the "
         "measured lengths, step by step), seconds per unit of executed training work (padded "
         "micro-batches, forward FLOPs), optimizer-step and weight-sync seconds, the split pools' "
         "weight crossings from the weights' bytes and the measured host-copy bandwidth on an "
         "accelerator; async = 2 weight crossings + trainer ranks taking groups as they arrive + "
         "step")

def measurements(sync_cell: dict, samples: list[dict],
                 events: list[dict]) -> list[SyncMeasurements]:
    """One SyncMeasurements per measured (post-warm-up) iteration of a sync cell."""
    its = [it for it in sync_cell.get("iterations") or [] if not it.get("warmup")] \
        or sync_cell.get("iterations") or []
    if not its:
        raise UserError(f"cell {sync_cell.get('cell')!r}: no iterations to predict from")
    by_iter: dict[int, list[dict]] = defaultdict(list)
    for s in samples:
        by_iter[s["iteration"]].append(s)
    stats = {r["iteration"]: r.get("workers") or [] for r in sync_cell.get("rollout_stats") or []}
    cfg = recorded_config(sync_cell)
    # None in results from before it was recorded
    shape = (sync_cell.get("model") or {}).get("shape")
    split = functools.partial(split_weight_sync_s, sync_cell)  # the cell's rule, per iteration's ws
    return [SyncMeasurements(it, by_iter.get(it["iteration"], []), events,
                             stats.get(it["iteration"], []), cfg, shape,
                             split) for it in its]


def predicted_speedup(ms: list[SyncMeasurements], pred_tpspd: list[float],
                      reference_tpspd: float | None,
                      reference_iterations: dict[int, float] | None = None) -> float | None:
    """The predicted TPSPD per batch over the reference, by the estimator the measured speedup it is
    set beside uses: with the reference's TPSPD per iteration, the typical paired ratio (exp of the
    trimmed mean of log(predicted TPSPD_k / reference TPSPD_k) over the iterations both have; the
    ratio of medians where they are too few for an interval), as analysis/intervals.py states the
    measured one; without it, the ratio of the medians. With a long tail the two estimators differ
    by 10% or more for the same iterations (the iterations' token counts swing), so a prediction
    compared with a measurement by the other one would carry that as error."""
    # inside: the estimator loads scipy.special (0.2 s), and every cell process imports this module
    # with the schedules' cost terms, where it is never called
    from rlbench.core.ratio_interval import typical_ratio

    if not reference_tpspd:
        return None
    medians = statistics.median(pred_tpspd) / reference_tpspd
    if reference_iterations is None:
        return medians
    logs = [math.log(p / reference_iterations[m.iteration]) for m, p in zip(ms, pred_tpspd)
            if p > 0 and (reference_iterations.get(m.iteration) or 0) > 0]
    return typical_ratio(logs, medians)


def predict_async(sync_cell: dict, samples: list[dict], events: list[dict], rollout_devices: int,
                  train_devices: int, overlap: bool = True, devices: int | None = None,
                  reference_tpspd: float | None = None,
                  reference_iterations: dict[int, float] | None = None) -> dict:
    """Predict a periodic-async cell from a measured sync cell (model: module docstring).

    devices: TPSPD divisor of the async run (default: the sync run's, the same physical devices);
    reference_tpspd: the measured TPSPD the speedup is relative to (default: this sync cell's
    median); reference_iterations: the reference's measured TPSPD by iteration, for the paired
    estimator (predicted_speedup; default: the ratio of medians).
    -> predicted_speedup, predicted_iter_s, predicted_sync_iter_s (in-sample check), sync_iter_s,
    rollout_share (sync's rollout seconds / wall), model text and the inputs used."""
    if rollout_devices < 1 or train_devices < 1:
        raise UserError(f"rollout_devices={rollout_devices}, train_devices={train_devices}: need "
                        f">= 1")
    ms = measurements(sync_cell, samples, events)
    d = devices or int(sync_cell.get("devices") or ms[0].n)
    its = [it for it in sync_cell["iterations"] if not it.get("warmup")] or sync_cell["iterations"]
    pred = [m.async_time(rollout_devices, train_devices, overlap) for m in ms]
    pred_sync = [m.sync_time() for m in ms]
    sync_tpspd = statistics.median(it["tpspd"] for it in its)
    ref = reference_tpspd or sync_tpspd
    pred_tpspd = [m.tokens / (p * d) if p > 0 else 0.0 for m, p in zip(ms, pred)]
    return {"predicted_speedup": predicted_speedup(ms, pred_tpspd, ref, reference_iterations),
            # beside a ratio of medians
            "predicted_speedup_medians": predicted_speedup(ms, pred_tpspd, ref),
            "predicted_tpspd": statistics.median(pred_tpspd),
            "predicted_iter_s": statistics.median(pred),
            "predicted_sync_iter_s": statistics.median(p for p, _ in pred_sync),
            "predicted_sync_rollout_s": statistics.median(r for _, r in pred_sync),
            "sync_rollout_s": statistics.median(m.measured_rollout for m in ms),
            "sync_iter_s": statistics.median(it["wall_s"] for it in its),
            "split_weight_sync_s": statistics.median(m.split_ws for m in ms),
            "rollout_share": rollout_share(sync_cell, events),
            "model": MODEL, "rollout_devices": rollout_devices, "train_devices": train_devices,
            "overlap": overlap, "devices": d, "iterations": [it["iteration"] for it in its]}


def rollout_share(cell: dict, events: list[dict]) -> float | None:
    """Share of a sync iteration's wall time its ranks spend generating (mean over ranks and
    iterations)."""
    its = [it for it in cell.get("iterations") or []
           if not it.get("warmup")] or cell.get("iterations") or []
    shares = []
    for it in its:
        d = durations(events, it["iteration"])
        if d["ranks"] and it["wall_s"] > 0:
            shares.append(d["rollout"] / it["wall_s"])
    return statistics.fmean(shares) if shares else None

