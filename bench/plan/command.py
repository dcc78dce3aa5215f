"""What `rlbench plan LOG` does: read the log (detect.py), build the cost model's batches from it (a
measured sync cell's own measurements, or a framework's logged steps with stated assumptions),
predict every schedule and split (rlbench.analysis.plan), and hand the result to the renderers."""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from rlbench.analysis.plan import PlanInput, plan, sweep_batches
from rlbench.core.costmodel.fromlog import batches_from_log, with_value
from rlbench.core.costmodel.predict import measurements
from rlbench.core.errors import UserError
from rlbench.plan import assume, detect, roofline
from rlbench.plan.logs import StepLog
from rlbench.simulate import link
from rlbench.simulate.model import rescale

MAX_STEPS = 32  # most logged steps the model runs on (spread evenly over the used ones)


def _spread(items: list, most: int) -> list:
    if len(items) <= most:
        return items
    return [items[int(i * len(items) / most)] for i in range(most)]


def measured_input(log: StepLog, gpus: int) -> tuple[PlanInput, list]:
    """An rlbench sync cell with its samples and events: the in-run model's measurements, nothing
    assumed."""
    cell = log.extra["cell"]
    batches = measurements(cell, log.extra["samples"], log.extra["events"])
    its = [it for it in cell["iterations"] if not it.get("warmup")] or cell["iterations"]
    # the reference is the run's own TPSPD, on whatever count it plans for
    ref = [it["tpspd"] for it in its]
    if gpus == log.devices:
        return PlanInput(batches, ref, gpus, partial="recompute"), []
    batches = [rescale(b, gpus) for b in batches]  # weak scaling: the measured load per device
    return PlanInput(batches, ref, gpus,
                     partial="recompute"), [other_count(gpus, log.devices, "run")]


def other_count(gpus: int, measured_on: int, what: str) -> str:
    """The note of a plan for another device count than the log's."""
    return (f"planned for {gpus} devices from a {what} on {measured_on}: the logged per-device "
            f"costs and load (weak scaling: {gpus}/{measured_on} of the batch); every TPSPD is per "
            f"device of the {gpus}, against the {what}'s own TPSPD on its {measured_on}; the model "
            f"check is the predicted sync on {gpus} "
            "against it")


def logged_input(log: StepLog, gpus: int, model: Path | None, device: str | None,
                 stated: dict | None = None) -> tuple[PlanInput, list, list]:
    """A framework's log: batches rebuilt from its steps with the stated assumptions."""
    if log.format == "trl":
        per = log.extra.get("train_batch_size")
        if not per:
            raise UserError(f"{log.path}: no 'train_batch_size' (samples per step per GPU) in "
                            f"trainer_state.json")
        for s in log.steps:
            s.samples = int(per) * (log.devices or gpus)
        log.notes.append(f"samples per step: train_batch_size {per} x {log.devices or gpus} GPUs "
                         "(gradient accumulation 1 assumed: the file does not record it)")
    used = _spread(log.used, MAX_STEPS)
    measured_on = log.devices or gpus
    shape = roofline.model_shape(model) if model else None
    lm = assume.log_model(used, measured_on, shape, device,
                          split=all(s.gen_s is not None for s in used),
                          known=log.extra.get("known"), stated=stated)
    batches = batches_from_log(used, lm)
    notes = [] if shape is not None or device is None else \
        ["--device without --model: the roofline needs the model's bytes, so the defaults stand"]
    if len(used) < len(log.used):
        notes.append(f"{len(used)} of the {len(log.used)} steps after warm-up, spread evenly, "
                     f"stand for them")
    sweep = sweep_batches(used)
    variants = {a.name: tuple(batches_from_log(sweep, with_value(lm, a.name, v)) for v in (a.low,
                                                                                           a.high))
                for a in lm.assumptions()}
    # the log's own TPSPD, whatever count is planned
    ref = [s.tokens / (s.wall_s * measured_on) for s in used]
    if gpus != measured_on:
        batches = [rescale(b, gpus) for b in batches]
        variants = {k: tuple([rescale(b, gpus) for b in bs] for bs in v)
                    for k, v in variants.items()}
        notes.append(other_count(gpus, measured_on, "log"))
    lean = None
    if all(s.old_logprob_s for s in used) and lm.rollout_share is None:
        lm.skip_old_logprob = True
        lean = [b if gpus == measured_on else rescale(b, gpus) for b in batches_from_log(used, lm)]
    return PlanInput(batches, ref, gpus, partial="keep", variants=variants,
                     without_old_logprob=lean), \
        lm.assumptions(), notes


def plan_input(log: StepLog, gpus: int, model: Path | None = None, device: str | None = None,
               stated: dict | None = None) -> tuple:
    """-> (PlanInput, assumptions, notes) of a log on `gpus` devices: a sync cell's own measurements
    where the log is one with its samples and events, else the log's steps with the stated
    assumptions (stated: the user's own values, assume.parse_stated)."""
    if log.format == "rlbench" and "samples" in log.extra:
        if stated:
            raise UserError(f"--assume {', '.join(stated)}: {log.path} is an rlbench sync cell "
                            "with its samples and events: every cost is measured, nothing is "
                            "assumed")
        inp, notes = measured_input(log, gpus)
        return inp, [], notes
    return logged_input(log, gpus, model, device, stated)


def node_layout(log: StepLog, inp: PlanInput, model: Path | None, stated_link,
                devices_per_node: int | None):
    """The devices on nodes and the link between them (core/costmodel/link.py); None: no link
    stated."""
    weights = None
    if model is not None:
        weights = roofline.model_shape(model).weight_bytes
    elif log.format == "rlbench":
        weights = link.weight_bytes(log.extra.get("cell") or {})
    if stated_link is not None and weights is None:
        raise UserError("--link-gbps: the weights' bytes are needed (--model CONFIG.json, or an "
                        "rlbench results.json)")
    return link.layout(stated_link, devices_per_node, weights, inp.batches)


def run_plan(path: Path, gpus: int | None = None, model: Path | None = None,
             device: str | None = None,
             assume_items: list[str] | None = None, stated_link=None,
             devices_per_node: int | None = None) -> dict:
    """Everything `rlbench plan` computes, as the JSON it prints with --json. assume_items: --assume
    NAME=VALUE; stated_link: the link between the nodes (--link-gbps), priced in every row with
    devices_per_node devices on a node (default 8)."""
    t0 = time.perf_counter()
    stated = assume.parse_stated(assume_items or [])  # before reading the log: a typo costs nothing
    log = detect.read_log(Path(path))
    if gpus is not None and gpus < 1:
        raise UserError(f"--gpus {gpus}: must be >= 1")
    if device is not None:
        roofline.device(device)  # a name it does not know is an error, with or without --model
    n = gpus or log.devices
    if not n:
        raise UserError(f"{log.path}: {log.no_devices}")
    inp, assumptions, notes = plan_input(log, n, model, device, stated)
    inp.layout = node_layout(log, inp, model, stated_link,
                             devices_per_node or (8 if stated_link else None))
    if inp.layout is not None:
        notes.append(f"the link between nodes is priced in every row "
                     f"({inp.layout.devices_per_node} devices per "
                     "node), and sync on those nodes is a row of its own; the model check and the "
                     "reference are the log's own layout")
    if n == 1:
        notes.append("one device: a rollout and a trainer process share it (as rlbench runs on one "
                     "GPU); the model counts no contention between them")
    result = plan(inp)
    used = [s.step for s in log.used]
    result.update({
        "kind": "plan", "log": str(log.path), "format": log.format, "keys": log.keys,
        "steps_used": [used[0], used[-1], len(used)] if used else [], "warmup_dropped": log.dropped,
        "log_devices": log.devices,
        "assumptions": [{**a.to_dict(), "key": assume.key_of(a.name)} for a in assumptions],
        "notes": log.notes + notes, "step_s_median": statistics.median(s.wall_s for s in log.used)})
    if inp.layout is not None:
        result["link"] = {**inp.layout.link.to_dict(),
                          "devices_per_node": inp.layout.devices_per_node,
                          "weight_bytes": inp.layout.weight_bytes,
                          "group_bytes": inp.layout.group_bytes}
    result["elapsed_s"] = time.perf_counter() - t0
    return result
