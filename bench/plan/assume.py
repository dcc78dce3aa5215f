"""The assumptions a plan from a framework's log states (costmodel/fromlog.py LogModel), each with
its value, range and source: measured in the log, measured by `rlbench env` on this machine,
roofline (--model, --device), a default with its range, or the user's own value (--assume
NAME=VALUE)."""
from __future__ import annotations

import statistics

from rlbench.core.costmodel.fromlog import Assumption, LoggedStep, LogModel
from rlbench.core.errors import UserError
from rlbench.plan import roofline

GROUP = Assumption("group size G", 8, 4, 16, "default",
                   "responses per prompt: GRPO's usual 4-16; the logs do not record it")
SLOPE = Assumption("decode-step growth with the batch", 0.3, 0.1, 0.6, "default",
                   "share of a decode step that grows with the sequences in flight (0: "
                   "weights-bound, the step costs the same however many; 1: proportional); "
                   "7B-class models at 64-512 sequences per GPU; --model and --device give the "
                   "roofline's")
TRAIN_SPEED = Assumption("split pool's training speed per device", 1.0, 1.0, 2.3, "default",
                         "over the colocated run's (logged); VERL's published sync/async pairs "
                         "trained 1.1-2.3x faster per GPU on a pool of their own "
                         "(docs/results/plan.md)")
# its value and range depend on the log (split_weight_sync)
WEIGHT_CROSSING = "weight crossing between pools (s)"
SHARE = Assumption("rollout share of the step", 0.6, 0.4, 0.8, "default",
                   "the log does not split generation from training")


def decode_slope(steps: list[LoggedStep], devices: int, shape: roofline.ModelShape | None,
                 max_num_seqs: int) -> Assumption:
    """Roofline: a memory-bound decode step reads the weights once and each sequence's KV cache, so
    its growing share at the logged sequences per device is their KV bytes over weights + KV
    bytes."""
    if shape is None:
        return SLOPE
    s = steps[len(steps) // 2]
    samples = s.samples or s.tokens / ((s.prompt_mean or 0) + s.response_mean)
    per_device = min(max_num_seqs, samples / devices)
    prompt = s.prompt_mean if s.prompt_mean is not None else s.tokens / samples - s.response_mean

    def share(ctx: float) -> float:
        kv = per_device * shape.kv_bytes(ctx)
        return kv / (shape.weight_bytes + kv)
    return Assumption("decode-step growth with the batch", share(prompt + s.response_mean / 2),
                      share(prompt),
                      share(prompt + s.response_mean), "roofline",
                      f"KV bytes of {per_device:.0f} sequences per device over weights + KV "
                      "(memory-bound decode), context from the prompt to prompt + mean response")


def split_weight_sync(steps: list[LoggedStep], shape: roofline.ModelShape | None,
                      device: str | None) -> Assumption:
    """One crossing of the weights between split pools: the weights' bytes over the measured host
    copy (`rlbench env`) or the datasheet's host link, down to the GPU link (a direct NCCL send);
    else the logged colocated sync, up to 4x it."""
    name = WEIGHT_CROSSING
    logged = [s.weight_sync_s for s in steps if s.weight_sync_s is not None]
    if shape is not None and (device or roofline.measured_host_copy(None)):
        probe = roofline.measured_host_copy(device)
        dev = roofline.device(device) if device else None
        host = probe[0] if probe else dev.host_bytes_per_s
        fast = dev.link_bytes_per_s if dev else host
        src = f"measured by `rlbench env` ({probe[1]})" if probe else "roofline"
        return Assumption(name, shape.weight_bytes / host, shape.weight_bytes / max(host, fast),
                          shape.weight_bytes / host * 2, src,
                          f"{shape.weight_bytes / 1e9:.1f} GB of weights over the host copy; down "
                          "to the GPU link, up to half the copy rate")
    if logged:
        ws = statistics.median(logged)
        return Assumption(name, ws, ws, 4 * ws, "measured in the log",
                          "the logged colocated weight sync; a crossing between pools may take up "
                          "to 4x (--model and --device give the roofline's)")
    wall = statistics.median(s.wall_s for s in steps)
    return Assumption(name, 0.02 * wall, 0.0, 0.1 * wall, "default",
                      "2% of the step (0-10%): the log has no weight-sync time")


# --assume NAME=VALUE: the user's own value of an assumption (measured on their cluster, say), by
# these names
STATED = {"group-size": ("group_size", 1.0, None), "decode-slope": ("decode_slope", 0.0, 1.0),
          "weight-crossing": ("split_weight_sync_s", 0.0, None),
          "train-speed": ("split_train_speed", 0.1, None),
          # name -> (LogModel field, lowest, highest allowed)
          "rollout-share": ("rollout_share", 0.0, 1.0)}


def key_of(name: str) -> str | None:
    """The --assume NAME of an assumption, by the name the plan prints."""
    return {GROUP.name: "group-size", SLOPE.name: "decode-slope",
            WEIGHT_CROSSING: "weight-crossing",
            TRAIN_SPEED.name: "train-speed", SHARE.name: "rollout-share"}.get(name)


def parse_stated(items: list[str]) -> dict[str, float]:
    """--assume NAME=VALUE options -> {name: value}; a malformed one exits 2 naming it and what is
    allowed."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or name not in STATED:
            raise UserError(f"--assume {item!r}: expected NAME=VALUE with NAME one of "
                            f"{', '.join(STATED)}")
        _, low, high = STATED[name]
        try:
            v = float(value)
        except ValueError:
            raise UserError(f"--assume {item!r}: {value!r} is not a number") from None
        if v < low or (high is not None and v > high) or (name == "group-size" and v != int(v)):
            allowed = "a whole number >= 1" if name == "group-size" else \
                f">= {low:g}" + ("" if high is None else f" and <= {high:g}")
            raise UserError(f"--assume {item!r}: {name} must be {allowed}")
        out[name] = v
    return out


def state(lm: LogModel, stated: dict[str, float]) -> LogModel:
    """The model with the user's values: each replaces its assumption's value and range (range = the
    value: the user knows it), source "stated (--assume)"; one the log's model does not use (a
    rollout share where the log splits generation from training, a training speed where the log is
    rlbench's own) is an error."""
    for name, value in stated.items():
        field_name = STATED[name][0]
        a = getattr(lm, field_name)
        if a is None:
            raise UserError(f"--assume {name}: this log's plan does not assume it (it is measured "
                            "in the log, or does not apply to it)")
        setattr(lm, field_name, Assumption(a.name, value, value, value, "stated (--assume)",
                                           f"the user's value; the default would be {a.value:g} "
                                           f"({a.low:g}-{a.high:g}, {a.source})"))
    return lm


def log_model(steps: list[LoggedStep], devices: int, shape=None, device: str | None = None,
              split: bool = True, known: dict | None = None,
              stated: dict | None = None) -> LogModel:
    """The LogModel of a log's used steps on `devices` GPUs. split: the log splits generation from
    training. known: what the log's own config states (rlbench's results.json: group_size,
    max_num_seqs), which then replaces the defaults; an rlbench run trains alike on either layout
    (its fair layout), so it states no training-speed range."""
    lm = LogModel(devices=devices, group_size=GROUP, decode_slope=SLOPE,
                  split_weight_sync_s=split_weight_sync(steps, shape, device),
                  rollout_share=None if split else SHARE, split_train_speed=TRAIN_SPEED)
    if known:
        g = known["group_size"]
        lm.group_size = Assumption(GROUP.name, g, g, g, "measured in the log",
                                   "the run's rollout.group_size")
        lm.max_num_seqs, lm.split_train_speed = known["max_num_seqs"], None
    lm.decode_slope = decode_slope(steps, devices, shape, lm.max_num_seqs)
    return state(lm, stated or {})
