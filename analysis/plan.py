"""`rlbench plan`'s predictions: every asynchronous schedule on every split of N devices, from the
batches of one synchronous run (a measured sync cell, or a framework's logged steps:
costmodel/fromlog.py), each by its own term of the cost model (costmodel.simulate), with an interval
and the attribution of its speedup (docs/architecture/cost-model.md, 'Planning from a log').

- The schedules: the barrier cell (the device split alone), periodic asynchrony, one-step-off,
  bounded staleness k, and k = 1 with partial rollout (new weights taken between decode steps).
- Splits: R rollout + (N - R) training devices for up to SPLITS values of R, swept on up to
  SWEEP_BATCHES batches spread over the log; the best split is then predicted on every batch.
- Interval: the typical per-step ratio of predicted TPSPD to the sync step's and its interval, by
  the one estimator of every rlbench verdict (core/ratio_interval.py: the value is the interval's
  centre; one value per logged step, however often a bounded schedule's simulation replays its
  batch), then widened by each assumption's range (the prediction with the assumption at either end
  of its range, one at a time, each end at the split it would choose itself, over the central
  prediction at its own best split; the widening multiplies) equally on both sides in log units, so
  the value stays the centre of the range printed: a range over the log's step spread and the
  assumptions together. Fewer than 4 logged steps: no interval on any row, the ratio of TPSPDs
  alone, and the verdict says too few.
- Best: the row with the largest reported speedup (the estimator that states it also chooses it).
- Tri-model (where the log times the old-policy log-prob pass apart): the best schedule again on
  batches trained without that pass (rlbench's tri-model; VERL's rollout log-probs), at its own best
  split; its interval widened by the best schedule's assumption ranges.
- Attribution (the families ladder's): split = barrier / sync, overlap = periodic-async / barrier,
  staleness = one-step-off / periodic-async, partial rollout = (k = 1 + partial) / one-step-off,
  tri-model = the best schedule without the old-log-prob pass / with it; their product (without
  tri-model) is the partial-rollout schedule's predicted speedup over the predicted sync.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from rlbench.analysis.intervals import outcome
from rlbench.core import schedules
from rlbench.core.costmodel.predict import SyncMeasurements
from rlbench.core.costmodel.simulate import ASYNC, BOUNDED_K, SimResult, simulate
from rlbench.core.ratio_interval import ratio_interval, typical_ratio
from rlbench.core.schedules.spec import BOUNDED, ONE_STEP, PERIODIC, REFERENCE

SPLITS = 8  # most rollout-pool sizes swept
SWEEP_BATCHES = 3  # batches the split sweep runs on (the best split then runs on every batch)
# the sweep's best splits run on every batch; the one with the larger reported speedup is chosen
FINALISTS = 2
# ... a runner-up only where the sweep puts it this close to the best (a few batches are noisy)
CLOSE = 0.10
STALENESS = 2  # the bounded-staleness row's k (one-step-off is k = 1)
# row kinds
BARRIER, OVERLAP, STALE, BOUNDED_ROW, PARTIAL = ("barrier", "periodic", "one-step", "bounded",
                                                 "partial")
LINKED_SYNC = "reference-linked"  # the reference on the nodes of a stated link (all-reduce across)


@dataclass(frozen=True)
class Row:
    """One predicted schedule: the label the tables show, simulate()'s arguments and its kind
    (BARRIER, OVERLAP, STALE, BOUNDED_ROW, PARTIAL: what the ladder and the reports key on)."""
    label: str
    schedule: str
    knobs: tuple = ()  # (name, value) pairs for simulate()
    kind: str = ""

    def kwargs(self) -> dict:
        return dict(self.knobs)


def rows(partial: str | None, layout=None) -> list[Row]:
    """The rows a plan predicts; partial: partial rollout's resume_kv (recompute / keep), None: no
    row. layout: the devices on nodes and the link between them (core/costmodel/link.py), priced in
    every row, and sync on those nodes predicted as a row of its own (its all-reduce crosses the
    link); None: one node."""
    periodic, one_step = schedules.by_role(PERIODIC).name, schedules.by_role(ONE_STEP).name
    out = [Row("barrier (split alone)", ASYNC, (("overlap", False),), BARRIER),
           Row(periodic, ASYNC, (), OVERLAP),
           Row(one_step, one_step, (), STALE),
           Row(f"{schedules.by_role(BOUNDED).name} k={STALENESS}", BOUNDED_K,
               (("staleness", STALENESS),), BOUNDED_ROW)]
    if partial:
        out.append(Row(f"k=1 + partial rollout ({partial} KV)", BOUNDED_K,
                       (("staleness", 1), ("partial_rollout", True), ("resume_kv", partial)),
                       PARTIAL))
    if layout is None:
        return out
    synced = Row(f"{schedules.name_of(REFERENCE)} (on the nodes)", schedules.name_of(REFERENCE), (),
                 LINKED_SYNC)
    return [Row(r.label, r.schedule, r.knobs + (("layout", layout),),
                r.kind) for r in [synced] + out]


@dataclass
class PlanInput:
    """batches: one per step used; reference: the sync step's TPSPD per batch (measured: the log's
    tokens / (step seconds x N); predicted where the log ran on other devices); variants: assumption
    name -> (batches at the low end of its range, at the high end), over the sweep's batches."""
    batches: list[SyncMeasurements]
    reference: list[float]
    devices: int
    partial: str | None = "keep"
    variants: dict[str, tuple[list, list]] = field(default_factory=dict)
    # the batches trained without that pass
    without_old_logprob: list[SyncMeasurements] | None = None
    # core/costmodel/link.py NodeLayout: the link's terms in every row; None: one node
    layout: object = None


def split_values(devices: int) -> list[int]:
    """Rollout-pool sizes to sweep: every R in 1..N-1 up to SPLITS of them, else SPLITS spread
    evenly; on one device, one rollout and one trainer process sharing it (as rlbench runs on a
    single GPU)."""
    if devices == 1:
        return [1]
    if devices - 1 <= SPLITS:
        return list(range(1, devices))
    return sorted({max(1, min(devices - 1,
                              round(devices * j / (SPLITS + 1)))) for j in range(1, SPLITS + 1)})


def sweep_batches(batches: list) -> list:
    """Up to SWEEP_BATCHES batches spread evenly over the log."""
    if len(batches) <= SWEEP_BATCHES:
        return batches
    step = len(batches) / SWEEP_BATCHES
    return [batches[int(i * step)] for i in range(SWEEP_BATCHES)]


def per_batch_tpspd(res: SimResult, batches: list[SyncMeasurements]) -> list[tuple[int, float]]:
    """(batch index, predicted TPSPD) of each simulated iteration: median-rate schedules give one
    per batch; bounded ones their steady-state iterations, the j-th being batch (warm-up + j) mod
    len."""
    its = res.per_iteration_s
    first = 0
    # bounded.py's default: k + 1 warm-up batches, then every batch once
    if res.staleness is not None:
        k = res.staleness
        first = min(k + 1, max(len(batches) + k + 1, 4 * (k + 1)) - 2)
    out = []
    for j, s in enumerate(its):
        b = (first + j) % len(batches)
        out.append((b, batches[b].tokens / (s * res.devices) if s > 0 else 0.0))
    return out


def step_logs(pairs: list[tuple[int, float]], reference: list[float]) -> list[float]:
    """One log-ratio per logged step, in the log's order: log(predicted TPSPD / the step's own). A
    bounded schedule's simulation cycles through the batches, so a short log's batch is replayed
    several times: its iterations are one step's prediction, averaged (in log units) into one value,
    never counted as several independent steps."""
    per: dict[int, list[float]] = {}
    for b, t in pairs:
        if t > 0 and reference[b] > 0:
            per.setdefault(b, []).append(math.log(t / reference[b]))
    return [statistics.fmean(per[b]) for b in sorted(per)]


def _sim(batches: list, row: Row, r: int, devices: int) -> SimResult:
    """row on r rollout + (devices - r) training devices; on one device both pools share it, and
    TPSPD divides by that one physical device (the cost model runs them as two devices' worth of
    time)."""
    res = simulate(batches, row.schedule, r, max(1, devices - r), **row.kwargs())
    if res.devices != devices:
        res.tpspd *= res.devices / devices
        res.devices = devices
    return res


def _curve(batches: list, row: Row, values: list[int], devices: int) -> list[dict]:
    """Predicted TPSPD of a row at each rollout-pool size in values, on these batches."""
    return [{"rollout_devices": r, "train_devices": max(1, devices - r),
             "tpspd": _sim(batches, row, r, devices).tpspd}
            for r in values]


def _swept(inp: PlanInput, near: int | None) -> list[int]:
    """The rollout-pool sizes a row is swept over (near: only the two on either side of that
    one)."""
    values = split_values(inp.devices)
    if near is not None:
        i = values.index(near) if near in values else 0
        values = values[max(0, i - 2):i + 3]
    return values


def predict_row(inp: PlanInput, row: Row, split: int | None = None,
                near: int | None = None) -> dict:
    """One schedule: the split curve, the best split (or `split` rollout devices, where given: no
    sweep; near: only the two swept splits on either side of that one), its predicted TPSPD and
    speedup with the interval (none with fewer than 4 logged steps: ratio_interval's MIN_PAIRED, one
    value per step, step_logs)."""
    sweep, values = sweep_batches(inp.batches), _swept(inp, near)
    curve = [] if split else _curve(sweep, row, values, inp.devices)
    ranked = sorted(curve, key=lambda c: -c["tpspd"])
    top = [split] if split else [c["rollout_devices"] for c in ranked[:FINALISTS]
                                 if c["tpspd"] >= ranked[0]["tpspd"] * (1 - CLOSE)]
    r, res, logs = max((_on_every_step(inp, row, r) for r in top),
                       key=lambda f: _typical(f[2], f[1], inp))
    for c in curve:  # the chosen split as every batch predicts it (the sweep ran on a few)
        if c["rollout_devices"] == r:
            c["tpspd"] = res.tpspd
    ref = statistics.median(inp.reference)
    found = ratio_interval(logs, serial=True)  # successive steps: serially correlated
    widen = _assumption_ranges(inp, row, r, sweep, None if split else values)
    if found is None:  # too few steps: the ratio of TPSPDs, no interval
        speedup, low, high = (res.tpspd / ref if ref else None), None, None
    else:
        speedup, low, high = found
    lo, hi = widened(low, high, widen["factor"])
    knobs = {k: v for k, v in row.knobs if k != "layout"}  # the layout is the plan's, printed once
    return {"label": row.label, "kind": row.kind, "schedule": row.schedule, **knobs,
            "rollout_devices": r,
            "train_devices": max(1, inp.devices - r), "devices": inp.devices, "tpspd": res.tpspd,
            "speedup": speedup,
            "low": lo, "high": hi, "step_low": low, "step_high": high, "steps": len(logs),
            "assumption_effects": widen["effects"], "assumption_splits": widen["splits"],
            "assumption_factor": widen["factor"], "staleness_max": res.staleness_max,
            "curve": curve,
            "link_s": res.link_s, "link_share": res.link_share, "outcome": outcome(speedup, lo, hi)}


def _on_every_step(inp: PlanInput, row: Row, r: int) -> tuple[int, SimResult, list[float]]:
    """row at split r predicted on every batch: (r, the result, one log-ratio per logged step)."""
    res = _sim(inp.batches, row, r, inp.devices)
    return r, res, step_logs(per_batch_tpspd(res, inp.batches), inp.reference)


def _typical(logs: list[float], res: SimResult, inp: PlanInput) -> float:
    """The speedup a row reports (the centre of its interval; the ratio of TPSPDs where too few
    steps), by which the split among the finalists is chosen: the estimator that reports it also
    chooses it."""
    ref = statistics.median(inp.reference)
    return typical_ratio(logs, res.tpspd / ref if ref else 0.0, serial=True) or 0.0


def widened(low, high, factor: float) -> tuple:
    """The step interval widened by `factor` (>= 1) on both sides in log units: its centre stays
    put."""
    if low is None or high is None:
        return None, None
    return low / factor, high * factor


def _assumption_ranges(inp: PlanInput, row: Row, r: int, sweep: list,
                       values: list[int] | None) -> dict:
    """Each assumption at either end of its range (one at a time) over the central prediction, each
    end at the split it would choose itself (the best of `values` on the sweep's batches; values
    None: at split r, the split the user fixed), against the central prediction at its own best
    split r -> {"low": product of the factors below 1, "high": of those above, "factor": the larger
    of 1 / low and high (the widening on either side), "effects": {name: [lo, hi]}, "splits": {name:
    [the split each end chose]}}."""
    if not inp.variants:
        return {"low": 1.0, "high": 1.0, "factor": 1.0, "effects": {}, "splits": {}}
    central = _sim(sweep, row, r, inp.devices).tpspd
    low = high = 1.0
    effects, splits = {}, {}
    for name, ends in inp.variants.items():
        best = [_climb(b, row, values or [r], r, inp.devices) for b in ends]
        f = [c["tpspd"] / central if central else 1.0 for c in best]
        effects[name], splits[name] = [min(f), max(f)], [c["rollout_devices"] for c in best]
        low *= min(1.0, *f)
        high *= max(1.0, *f)
    return {"low": low, "high": high, "factor": max(1.0 / low if low > 0 else 1.0, high),
            "effects": effects,
            "splits": splits}


def _climb(batches: list, row: Row, values: list[int], start: int, devices: int) -> dict:
    """The best of `values` for a row on these batches, found by climbing from `start` (the central
    best split) to the neighbour that predicts more, until neither does: TPSPD over the rollout
    pool's size rises while generation bounds the iteration and falls once training does, so the
    climb ends where the full sweep would, in a few predictions instead of one per split."""
    at = {}

    def tpspd(i: int) -> float:
        if i not in at:
            at[i] = _sim(batches, row, values[i], devices).tpspd
        return at[i]

    i = values.index(start) if start in values else 0
    while True:
        up = [j for j in (i - 1, i + 1) if 0 <= j < len(values) and tpspd(j) > tpspd(i)]
        if not up:
            return {"rollout_devices": values[i], "tpspd": tpspd(i)}
        i = max(up, key=tpspd)


def model_check(inp: PlanInput) -> dict:
    """The model's in-sample check: sync on the N colocated devices, predicted from the same
    batches, against the logged steps (a large error: the log's stages do not add up to its step, or
    the layout differs)."""
    # sync's own term (core/costmodel/colocated.py)
    walls = [b.sync_time(inp.devices)[0] for b in inp.batches]
    tpspd = statistics.median(b.tokens / (w * inp.devices) for b, w in zip(inp.batches, walls))
    ref = statistics.median(inp.reference)
    return {"predicted_tpspd": tpspd, "reference_tpspd": ref,
            "error": tpspd / ref - 1 if ref else None}


def ladder(preds: list[dict], sync_tpspd: float) -> dict:
    """split x overlap x staleness x partial rollout, each rung over the one before (predicted)."""
    by = {p["kind"]: p for p in preds}
    names = [("split", BARRIER), ("overlap", OVERLAP), ("staleness", STALE),
             ("partial rollout", PARTIAL)]
    out, before = {}, sync_tpspd
    for factor, label in names:
        if label not in by or not before:
            continue
        out[factor] = by[label]["tpspd"] / before
        before = by[label]["tpspd"]
    return out


def tri_model_row(inp: PlanInput, best: dict) -> dict | None:
    """The best schedule trained without the old-policy log-prob pass, at its own best split (of the
    best schedule's and the swept splits beside it); its interval the
    step spread widened by the best schedule's assumption ranges (None: the log does not time that
    pass)."""
    if not inp.without_old_logprob:
        return None
    row = next(r for r in rows(inp.partial, inp.layout) if r.label == best["label"])
    lean = PlanInput(inp.without_old_logprob, inp.reference, inp.devices, inp.partial,
                     layout=inp.layout)
    out = predict_row(lean,
                      Row(f"{row.label} + no old-log-prob pass", row.schedule, row.knobs, row.kind),
                      # the sweep beside the best schedule's split only
                      near=best["rollout_devices"])
    out["tri_model_of"] = best["label"]
    out["low"], out["high"] = widened(out["step_low"], out["step_high"], best["assumption_factor"])
    out["assumption_effects"], out["assumption_factor"] = (best["assumption_effects"],
                                                           best["assumption_factor"])
    out["outcome"] = outcome(out["speedup"], out["low"], out["high"])
    return out


def plan(inp: PlanInput) -> dict:
    """Every row predicted, the best schedule (and it without the old-log-prob pass), the sync check
    and the ladder."""
    if len(inp.batches) != len(inp.reference):
        raise ValueError("one reference TPSPD per batch")
    preds = [predict_row(inp, row) for row in rows(inp.partial, inp.layout)]
    check = model_check(inp)
    best = max(preds, key=_rank)
    lad = ladder(preds, check["predicted_tpspd"])
    tri = tri_model_row(inp, best)
    if tri is not None:
        preds.append(tri)
        lad["tri-model"] = tri["tpspd"] / best["tpspd"]
    chain = math.prod(v for k, v in lad.items() if k != "tri-model")
    return {"devices": inp.devices, "steps": len(inp.batches),
            "reference_tpspd": statistics.median(inp.reference),
            "rows": preds, "best": max(preds, key=_rank), "model_check": check, "ladder": lad,
            "ladder_product": chain}


def _rank(p: dict) -> float:
    """What "best" is chosen by: the speedup the plan reports (the centre of its interval, by the
    one estimator of every verdict), so the schedule named best is the one whose printed number is
    largest."""
    return p["speedup"] if p["speedup"] is not None else p["tpspd"]
