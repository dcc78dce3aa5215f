"""What the simulator runs on: batches with their per-device costs, in the report's model.

A *batch* is one rlbench.core.costmodel.sync_measurements.SyncMeasurements: one iteration's samples
(prompt, sample, prompt_len, response_len) and the costs of one device running one worker, measured
in a data-parallel sync cell (or stated by a preset):

    decode step                              StepCost: by its batch bucket and cache window (a plane
    over the
                                             measured shapes) or, stated, by B sequences in flight;
                                             plus a refill cost per admission round
    training                                 seconds per trained token (all per-sample phases)
    optimizer step (with its all-reduce)     seconds, per step
    weight sync                              seconds, per transfer (async: publish + load = 2)

Every device runs at these costs whatever the device count: a pool of N devices is N workers, each
with its shard of the batch (docs/architecture/placement.md). Nothing scales by an exponent (the one
fit, a decode step's seconds as a plane over its bucket and window, prices the shapes a device
runs); what changes with the device count is the work each device gets and how long it waits.

Units: seconds, tokens, devices.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from rlbench.core.costmodel.decode import StepCost
from rlbench.core.costmodel.counted import Rows
from rlbench.core.costmodel.sync_measurements import SyncMeasurements


@dataclass
class Costs:
    """Stated per-device costs (a preset): a decode step = decode_a_s + decode_b_s * B seconds."""
    decode_a_s: float
    decode_b_s: float
    max_num_seqs: int
    train_s_per_token: float
    optimizer_step_s: float
    weight_sync_s: float

    def step_cost(self) -> StepCost:
        """A step table linear in B between 1 and max_num_seqs (StepCost interpolates between
        them)."""
        rows = {b: (1, self.decode_a_s + self.decode_b_s * b) for b in (1, self.max_num_seqs)}
        return StepCost(rows, 0.0, 0)

    def batch(self, samples: list[dict], g: int, shared_prompt: bool = False,
              train_scale: float = 1.0) -> SyncMeasurements:
        return SyncMeasurements.stated(self.step_cost(), self.train_s_per_token * train_scale,
                                       self.weight_sync_s, self.optimizer_step_s, self.max_num_seqs,
                                       g,
                                       shared_prompt, samples)


def rescale(m: SyncMeasurements, devices: int) -> SyncMeasurements:
    """The same batch for `devices` devices at the measured load per device (weak scaling): prompts
    x devices / measured ranks groups, the measured groups repeated so that new sync rank r gets
    copies of measured rank r mod ranks's shard (exactly, when devices is a multiple of the ranks);
    same costs. The batch's token count (TPSPD's numerator: a log's own, not its synthetic rows')
    grows with the rows."""
    memo = m.samples.memo if isinstance(m.samples, Rows) else {}
    key = ("rescaled", devices, m.n)
    # every batch built on the same rows (a plan's assumption ends) shares the dealt rows
    if key not in memo:
        memo[key] = _dealt(m, devices)
    rows = memo[key]
    out = SyncMeasurements.stated(m.cost, m.c_tok, m.ws, m.opt, m.slots, m.g, m.shared_prompt, rows,
                                  m.n,
                                  m.micro_batch, m.shape, m.split_ws, m.train_speed)
    out.tokens = m.tokens * len(rows) / len(m.samples)
    return out


def _dealt(m: SyncMeasurements, devices: int) -> Rows:
    groups: dict[int, list[dict]] = {}
    for s in m.samples:
        groups.setdefault(int(s["prompt"]), []).append(s)
    order, n = sorted(groups), m.n
    count = max(1, round(len(order) * devices / n))
    rows = Rows()
    for q in range(count):  # new prompt q: rank q % devices, position q // devices in its shard
        p = ((q // devices) * n + (q % devices) % n) % len(order)
        rows += [{**s, "prompt": q} for s in groups[order[p]]]
    return rows


def prompts_of(m: SyncMeasurements) -> int:
    return len({s["prompt"] for s in m.samples})


def lognormal_samples(prompts: int, g: int, response_mean: float, sigma: float, max_response: int,
                      prompt_mean: float, prompt_sd: float, seed: int = 0) -> list[dict]:
    """Synthetic sample rows: prompt ~ Normal(prompt_mean, prompt_sd) (>= 16 tokens); responses
    ~ LogNormal with the given mean and shape sigma, cut at max_response (unfinished answers)."""
    rng = random.Random(seed)
    mu = math.log(response_mean) - sigma ** 2 / 2  # so that the uncut mean is response_mean
    rows = []
    for p in range(prompts):
        plen = max(16, round(rng.gauss(prompt_mean, prompt_sd)))
        rows += [{"prompt": p, "sample": j, "prompt_len": plen,
                  "response_len": min(max_response, max(1, round(rng.lognormvariate(mu, sigma))))}
                 for j in range(g)]
    return rows


def summary(batches: list[SyncMeasurements]) -> dict:
    """Lengths of the simulated work (all batches together)."""
    resp = sorted(int(s["response_len"]) for m in batches for s in m.samples)
    prm = [int(s["prompt_len"]) for m in batches for s in m.samples]
    return {"batches": len(batches), "prompts": prompts_of(batches[0]), "group_size": batches[0].g,
            "prompt_len_mean": sum(prm) / len(prm), "response_len_mean": sum(resp) / len(resp),
            "response_len_p50": resp[len(resp) // 2],
            "response_len_p99": resp[min(len(resp) - 1, int(0.99 * len(resp)))],
            "response_len_max": resp[-1]}


def costs_of(m: SyncMeasurements) -> dict:
    """One batch's per-device costs as JSON (calibration.json)."""
    shapes = m.cost.shapes
    plane = {"decode_step_plane": dict(zip(("s", "s_per_row", "s_per_position",
                                            "s_per_row_position"),
                                           map(float, shapes.coef)))} if shapes is not None else {}
    return {"decode_step_s_by_active": dict(zip(m.cost.bs, m.cost.cost)), **plane,
            "refill_s": m.cost.refill,
            "prefill_s_per_token": m.cost.prefill,
            "decode_step_fallback_s": m.cost.fallback, "train_s_per_token": m.s_per_token(),
            "optimizer_step_s": m.opt, "weight_sync_s": m.ws, "split_weight_sync_s": m.split_ws,
            "max_num_seqs": m.slots, "group_size": m.g,
            "shared_prompt": m.shared_prompt, "measured_ranks": m.n, "tokens": m.tokens}
