"""The cost model's batches from a synchronous run's logged stage times (`rlbench plan`,
docs/architecture/cost-model.md, 'Planning from a log').

A framework's log (VERL's `timing_s/*`, TRL's log history, an rlbench results.json without its
events) says, per step, how long the whole cluster of N devices spent generating, training and
syncing weights, and the batch's token counts and response lengths; it does not say what rlbench's
own sync cell measures per device (decode-step seconds by sequences in flight, each sample's
length). This module rebuilds a sync_measurements.SyncMeasurements per logged step from what the log
says plus stated assumptions, so that every schedule's own term of the cost model
(costmodel.simulate) predicts it, as it predicts a measured sync cell:

- samples: the step's samples (logged, or tokens / (prompt mean + response mean)) in groups of G; a
  synthetic batch of at most SIM_PROMPTS groups stands for them (each synthetic sample stands for
  `scale` real ones: the decode step sees scale x the synthetic sequences in flight);
- response lengths: log-normal quantiles with the logged mean whose largest is the logged maximum
  (the tail that keeps a synchronous cluster generating), prompts at the logged mean;
- decode step with B real sequences in flight on one device: c0 (1 - slope + slope B / B0), B0 the
  sequences per device of the logged sync layout; slope 0 is a memory-bound step that costs the same
  at any batch, 1 one whose cost grows with the batch; c0 is set so that the replay of the sync
  layout takes the logged generation seconds;
- training: the logged training seconds x N devices, spread over the synthetic batch's tokens (data
  parallel: every device trains its shard at the same seconds per token);
- weight sync: the logged colocated sync; one crossing between split pools is an assumption;
- a split training pool trains at the colocated devices' logged rate per device times a stated speed
  (a framework whose colocated engine shares each device with the rollout engine may train faster on
  a pool of its own: an assumption, 1 by default, or the user's own value; the colocated sync's term
  never sees it);
- lengths are counted in quanta of q = ceil(longest / QUANTUM_STEPS) tokens (a decode step of the
  replay is q real ones; c0 absorbs q), so that a replay costs the same for 500- and 16,000-token
  responses;
- the rest of the step (logged step minus generation, training and weight sync) stays serial in
  every schedule (folded into the optimizer-step term).

Units: seconds, tokens, devices. Pure Python; nothing fitted beyond c0 and the training rate, which
the log measures.
"""
from __future__ import annotations

import functools
import itertools
import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from rlbench.core.costmodel.decode import StepCost
from rlbench.core.costmodel.counted import Rows
from rlbench.core.costmodel.predict import SyncMeasurements
from rlbench.core.errors import UserError

# most decode steps a replay counts: lengths in quanta of ceil(longest / 128) tokens
QUANTUM_STEPS = 128


@dataclass
class LoggedStep:
    """One synchronous step as a log gives it (seconds of the whole N-device cluster, tokens of the
    batch)."""
    step: int
    wall_s: float  # the step, evaluation and checkpointing excluded
    tokens: float  # prompt + response tokens of every trained sample
    response_mean: float
    gen_s: float | None = None  # None: the log does not split generation from training
    train_s: float | None = None  # reward + log-probs + advantage + update (+ optimizer step)
    weight_sync_s: float | None = None
    samples: int | None = None  # None: tokens / (prompt mean + response mean)
    prompt_mean: float | None = None
    response_max: float | None = None
    # the old-policy log-prob pass, part of train_s, where logged apart
    old_logprob_s: float | None = None


@dataclass
class Assumption:
    """A quantity the log cannot give: its value, its range and where both come from."""
    name: str
    value: float
    low: float
    high: float
    source: str  # measured in the log / measured by `rlbench env` / roofline / default
    why: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "low": self.low, "high": self.high,
                "source": self.source, "why": self.why}


@dataclass
class LogModel:
    """The stated assumptions a logged run's batches are built with (see the module docstring)."""
    devices: int
    group_size: Assumption
    decode_slope: Assumption
    split_weight_sync_s: Assumption
    # only where the log does not split generation from training
    rollout_share: Assumption | None = None
    # a split pool's training speed per device over the colocated one
    split_train_speed: Assumption | None = None
    max_num_seqs: int = 1024  # sequences in flight per rollout device (vLLM's max_num_seqs in VERL)
    # train without the old-policy log-prob pass (tri-model, rollout log-probs)
    skip_old_logprob: bool = False
    notes: list[str] = field(default_factory=list)

    def assumptions(self) -> list[Assumption]:
        return [a for a in (self.group_size, self.decode_slope, self.split_weight_sync_s,
                            self.rollout_share,
                            self.split_train_speed) if a]


@functools.lru_cache(maxsize=64)
def _normal_quantiles(n: int) -> np.ndarray:
    """The standard normal's (i + 0.5) / n quantiles, i < n: the same for every step of a log's
    batch size."""
    inv = statistics.NormalDist().inv_cdf
    return np.array([inv((i + 0.5) / n) for i in range(n)])


def response_lengths(n: int, mean: float, longest: float | None, real: int, seed: int) -> list[int]:
    """n response lengths (tokens): log-normal quantiles (i + 0.5) / n with mean `mean`, shaped so
    that the largest of `real` draws is about `longest` (the logged maximum, which the longest
    length is set to), shuffled by seed. Without a maximum, shape 0.5."""
    z = statistics.NormalDist().inv_cdf(1 - 1 / (2 * max(2, real)))
    ratio = (longest or 0) / mean if mean > 0 else 0
    if ratio > 1:
        disc = z * z - 2 * math.log(ratio)
        sigma = z - math.sqrt(disc) if disc > 0 else z
    else:
        sigma = 0.5 if not longest else 0.0
    mu, sd = math.log(max(mean, 1.0)) - sigma * sigma / 2, max(sigma, 1e-9)
    lens = np.exp(mu + sd * _normal_quantiles(n))  # [n], ascending
    cap = longest or float(lens.max())
    lens = np.minimum(cap, lens)
    # the logged mean exactly (before the cap)
    k = mean * n / float(lens.sum()) if lens.sum() else 1.0
    out = np.clip(np.rint(lens * k), 1, int(cap)).astype(np.int64)  # rint: half to even, as round()
    if longest:
        out[int(out.argmax())] = int(longest)  # the logged tail itself
    return np.random.default_rng(seed).permutation(out).tolist()


@functools.lru_cache(maxsize=256)
def _rows(step: int, mean: float, longest: float | None, real: int, g: int, prompts: int,
          prompt_len: int) -> Rows:
    """The synthetic batch's rows (prompt, sample, prompt_len, response_len), lengths in quanta;
    kept, with their shards and replays (Rows), for every batch built on the same step and group
    size (the plan builds each step at the ends of every assumption's range)."""
    lens = np.array(response_lengths(prompts * g, mean, longest, real, step))
    q = max(1, math.ceil(int(lens.max()) / QUANTUM_STEPS))
    pl = max(1, round(prompt_len / q))
    quanta = np.maximum(1, np.rint(lens / q)).astype(np.int64).tolist()
    return Rows({"prompt": p, "sample": j, "prompt_len": pl, "response_len": r}
                for (p, j), r in zip(itertools.product(range(prompts), range(g)), quanta))


def _step_cost(c0: float, slope: float, per_device: float, scale: float, top: int) -> StepCost:
    """Decode step on one device with b synthetic (b x scale real) sequences in flight, linear in b:
    c0 (1 - slope + slope b scale / per_device)."""
    return StepCost.linear_in_flight(c0 * (1 - slope), c0 * slope * scale / per_device, top)


def batch_from_step(s: LoggedStep, lm: LogModel) -> SyncMeasurements:
    """One logged step -> the cost model's batch (module docstring): the log's own groups dealt to
    the devices (no fewer per device than the real batch gives them: a device's share of the longest
    responses and of the training is what the sync step's time is made of)."""
    g = max(1, round(lm.group_size.value))
    samples = s.samples or round(s.tokens / (s.prompt_mean + s.response_mean))
    prompt_len = max(1, round(s.prompt_mean if s.prompt_mean is not None else s.tokens / samples
                              - s.response_mean))
    prompts = max(1, round(samples / g))
    # real samples per synthetic one (1 but for the rounding to whole groups)
    scale = samples / (prompts * g)
    rows = _rows(s.step, s.response_mean, s.response_max, s.samples or prompts * g, g, prompts,
                 prompt_len)
    gen_s, train_s, ws = _split_stages(s, lm)
    per_device = max(1.0, min(lm.max_num_seqs, samples / lm.devices))
    slots = max(1, math.ceil(lm.max_num_seqs / scale))
    other = max(0.0, s.wall_s - gen_s - train_s - ws)
    if lm.skip_old_logprob:
        train_s -= s.old_logprob_s or 0.0
    # 1: the sync's own per-device rate
    speed = lm.split_train_speed.value if lm.split_train_speed else 1.0
    unit = _step_cost(1.0, lm.decode_slope.value, per_device, scale, len(rows))
    m = SyncMeasurements.stated(unit, 1.0, ws, other, slots, g, False, rows, ranks=lm.devices,
                                split_ws=lm.split_weight_sync_s.value, train_speed=speed)
    # m.tokens: the synthetic rows' (in quanta) until set below
    m.c_tok = train_s * lm.devices / m.tokens
    steps = max(m.rollout_s(lm.devices))  # the sync layout's replay at c0 = 1
    m.cost = _step_cost(gen_s / steps if steps else 0.0, lm.decode_slope.value, per_device, scale,
                        len(rows))
    m.tokens = s.tokens  # TPSPD counts the logged batch's tokens
    m.measured_rollout = gen_s
    return m


def _split_stages(s: LoggedStep, lm: LogModel) -> tuple[float, float, float]:
    """(generation, training, weight-sync seconds) of a step; a log without generation time splits
    the step by the rollout-share assumption."""
    ws = s.weight_sync_s or 0.0
    if s.gen_s is not None and s.train_s is not None:
        return s.gen_s, s.train_s, ws
    if lm.rollout_share is None:
        raise UserError(f"step {s.step}: no generation and training seconds, and no rollout share "
                        "to split the step by")
    body = max(0.0, s.wall_s - ws)
    return body * lm.rollout_share.value, body * (1 - lm.rollout_share.value), ws


def batches_from_log(steps: list[LoggedStep], lm: LogModel) -> list[SyncMeasurements]:
    """One batch per logged step (already past warm-up)."""
    if not steps:
        raise UserError("no steps to plan from")
    return [batch_from_step(s, lm) for s in steps]


def with_value(lm: LogModel, name: str, value: float) -> LogModel:
    """The same model with one assumption at another value (an end of its range)."""
    out = LogModel(**{**lm.__dict__, "notes": list(lm.notes)})
    for key in ("group_size", "decode_slope", "split_weight_sync_s", "rollout_share",
                "split_train_speed"):
        a = getattr(out, key)
        if a is not None and a.name == name:
            setattr(out, key, Assumption(a.name, value, a.low, a.high, a.source, a.why))
    return out
