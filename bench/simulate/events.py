"""Discrete-event model of the three schedules (DESIGN.md §1) over a Calibration and a Workload.

Rollout: the batch's groups are dealt round-robin to the pool's instances (as the rollout pool
shards prompts); each instance keeps up to max_num_seqs sequences in flight, refills a finished
sequence's slot at once (continuous batching), advances every sequence in flight by one token per
decode step, and a step costs Calibration.step_s(in flight). A group is done when its last sample
is; devices of an instance with nothing in flight are idle.

- sync: all N + M devices colocated, phases in sequence:
  weight_sync -> rollout of the whole batch -> training of every sample -> optimizer step.
- periodic_async: rollout pool N, training pool M. Weight sync, then the trainer takes groups in
  arrival order (training a group starts when it has arrived and the previous one is trained), one
  optimizer step after the last; the next iteration starts after the step (+ overhead).
- bounded_async(k): rollout of batch i may start when the rollout pool is free and weights of
  version >= i - k exist (version v exists once optimizer step v - 1 is done); if a newer version
  exists than the pool holds, it first loads it (weight_sync on the rollout pool; the trainer's
  side of the transfer is taken as free). The trainer trains batch i, whole, once all its groups
  are there. k = 0 is the synchronous loop on split pools. Measured over the steady state (after
  k + 1 batches).

Idle share of a pool = 1 - (device-seconds at work) / (devices * wall time), as rlbench.metrics
counts it from events: a rollout instance with nothing in flight, a trainer waiting for groups, and
the untimed per-iteration overhead are idle; weight sync is work for both pools (periodic/sync).
"""
from __future__ import annotations

import heapq
import statistics
from dataclasses import asdict, dataclass, field

from rlbench.errors import UserError
from rlbench.simulate.model import Calibration, Group, Workload

SCHEDULES = ("sync", "periodic_async", "bounded_async")


@dataclass
class Rollout:
    end: float  # s: when the last instance finishes
    arrivals: list[tuple[float, int]]  # (finish time, group index in the batch), in arrival order
    busy_dev_s: float  # device-seconds with at least one sequence in flight
    slot_s: float  # sequence-seconds in flight (for occupancy)
    slot_cap_s: float  # slot-seconds offered while instances were busy


@dataclass
class SimResult:
    schedule: str
    rollout_devices: int  # sync: the colocated devices count here (and in train_devices)
    train_devices: int
    devices: int  # TPSPD divisor: every device of the run
    tpspd: float  # tokens / (s * device), median over iterations (bounded: steady-state rate)
    iter_s: float  # median (bounded: steady-state mean) seconds per iteration
    idle: dict[str, float]  # pool -> share of its device-time with no work, in [0, 1]
    rollout_occupancy: float  # time-weighted in-flight sequences / max_num_seqs while generating
    staleness: int | None = None  # bounded_async: k
    staleness_max: int = 0  # largest (trained version - behaviour version) seen
    per_iteration_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def instance(lengths: list[int], slots: int, step, t0: float) -> tuple[list[float], float, float]:
    """One rollout instance: response lengths in dispatch order -> (finish time of each sample,
    time the instance runs dry, sequence-seconds in flight). step(B) = seconds of a decode step."""
    finish = [t0] * len(lengths)
    heap: list[tuple[int, int]] = []  # (decode step at which the sample ends, sample index)
    nxt, steps, t, area = 0, 0, t0, 0.0
    while nxt < len(lengths) or heap:
        while nxt < len(lengths) and len(heap) < slots:
            heapq.heappush(heap, (steps + lengths[nxt], nxt))
            nxt += 1
        b = len(heap)
        target = heap[0][0]  # jump to the next finishing sample: B is constant until then
        dt = (target - steps) * step(b)
        t, area, steps = t + dt, area + b * dt, target
        while heap and heap[0][0] == steps:
            finish[heapq.heappop(heap)[1]] = t
    return finish, t, area


def rollout(batch: list[Group], cal: Calibration, pool: int, t0: float, tp: int | None) -> Rollout:
    """Generate one batch on a pool of `pool` devices starting at t0."""
    inst_dev = pool if tp is None else max(1, min(tp, pool))
    n_inst = max(1, pool // inst_dev)
    memo: dict[int, float] = {}

    def step(b: int) -> float:
        if b not in memo:
            memo[b] = cal.step_s(b, inst_dev)
        return memo[b]

    arrivals, end, busy, slot_s, cap = [], t0, 0.0, 0.0, 0.0
    for j in range(n_inst):
        gids = list(range(j, len(batch), n_inst))
        if not gids:
            continue
        lens = [x for g in gids for x in batch[g][1]]
        fin, t_end, area = instance(lens, cal.max_num_seqs, step, t0)
        pos = 0
        for g in gids:
            n = len(batch[g][1])
            arrivals.append((max(fin[pos:pos + n]), g))
            pos += n
        end, busy = max(end, t_end), busy + inst_dev * (t_end - t0)
        slot_s, cap = slot_s + area, cap + cal.max_num_seqs * (t_end - t0)
    arrivals.sort()
    return Rollout(end, arrivals, busy, slot_s, cap)


def train_tokens(group: Group, shared_prompt: bool) -> int:
    """Tokens the trainer processes for a group: G*(P+R) rows, or P + sum(R) packed."""
    p, r = group
    return p + sum(r) if shared_prompt else p * len(r) + sum(r)


@dataclass
class Knobs:
    """Options of one simulation besides the split: see simulate()."""
    shared_prompt: bool = False
    train_scale: float = 1.0
    tp: int | None = None


def _train_s(cal: Calibration, tokens: int, m: int, kn: Knobs) -> float:
    return cal.train_s_per_token * tokens * cal.train_scale(m, kn.tp is not None) * kn.train_scale


def _sync_iter(cal, batch, d, kn):
    ws = cal.weight_sync_s
    ro = rollout(batch, cal, d, ws, kn.tp)
    train = _train_s(cal, sum(train_tokens(g, kn.shared_prompt) for g in batch), d, kn)
    opt = cal.optimizer_step_s * cal.train_scale(d, kn.tp is not None)
    wall = ro.end + train + opt + cal.overhead_s
    return wall, {"colocated": d * (ws + train + opt) + ro.busy_dev_s}, ro


def _periodic_iter(cal, batch, n, m, kn):
    ws = cal.weight_sync_s
    ro = rollout(batch, cal, n, ws, kn.tp)
    finish, train = ws, 0.0
    for arrived, g in ro.arrivals:  # trainer consumes in arrival order
        cost = _train_s(cal, train_tokens(batch[g], kn.shared_prompt), m, kn)
        finish, train = max(finish, arrived) + cost, train + cost
    opt = cal.optimizer_step_s * cal.train_scale(m, kn.tp is not None)
    wall = finish + opt + cal.overhead_s
    return wall, {"rollout": n * ws + ro.busy_dev_s, "train": m * (ws + train + opt)}, ro


def _independent(cal, wl, schedule, n, m, kn) -> SimResult:
    """sync / periodic_async: iterations do not overlap, so each batch is simulated on its own."""
    d = n + m
    walls, busy, slot_s, cap = [], {}, 0.0, 0.0
    for batch in wl.batches:
        wall, b, ro = _sync_iter(cal, batch, d, kn) if schedule == "sync" \
            else _periodic_iter(cal, batch, n, m, kn)
        walls.append(wall)
        for k, v in b.items():
            busy[k] = busy.get(k, 0.0) + v
        slot_s, cap = slot_s + ro.slot_s, cap + ro.slot_cap_s
    size = {"colocated": d, "rollout": n, "train": m}
    idle = {k: _clamp(1 - v / (size[k] * sum(walls))) for k, v in busy.items()}
    tpspd = statistics.median(wl.tokens(i) / (w * d) for i, w in enumerate(walls))
    return SimResult(schedule, n, m, d, tpspd, statistics.median(walls), idle,
                     slot_s / cap if cap else 0.0, per_iteration_s=walls)


def _bounded(cal, wl, n, m, k, kn, iterations: int | None = None) -> SimResult:
    """Bounded staleness k: rollout runs up to k batches ahead of the trainer (module docstring)."""
    total = iterations or max(8, 4 * (k + 1))
    warm = min(k + 1, total - 2)
    ready = [0.0]  # ready[v]: time weights of version v exist
    pool_free, trainer_free, held = 0.0, 0.0, -1
    r_busy, t_busy, stale, slot_s, cap = [], [], [], 0.0, 0.0
    for i in range(total):
        batch = wl.batches[i % len(wl.batches)]
        t = max(pool_free, ready[max(0, i - k)])
        latest = max(v for v in range(len(ready)) if ready[v] <= t)
        sync_s = 0.0
        if latest > held:
            sync_s, held = cal.weight_sync_s, latest
        ro = rollout(batch, cal, n, t + sync_s, kn.tp)
        pool_free = ro.end
        train = _train_s(cal, sum(train_tokens(g, kn.shared_prompt) for g in batch), m, kn)
        opt = cal.optimizer_step_s * cal.train_scale(m, kn.tp is not None)
        trainer_free = max(trainer_free, ro.end) + train + opt + cal.overhead_s
        ready.append(trainer_free)
        r_busy.append(n * sync_s + ro.busy_dev_s)
        t_busy.append(m * (train + opt))
        stale.append(i - held)
        if i >= warm:
            slot_s, cap = slot_s + ro.slot_s, cap + ro.slot_cap_s
    span = ready[total] - ready[warm]
    its = [ready[i + 1] - ready[i] for i in range(warm, total)]
    tokens = sum(wl.tokens(i % len(wl.batches)) for i in range(warm, total))
    idle = {"rollout": _clamp(1 - sum(r_busy[warm:]) / (n * span)),
            "train": _clamp(1 - sum(t_busy[warm:]) / (m * span))}
    return SimResult("bounded_async", n, m, n + m, tokens / (span * (n + m)), span / len(its), idle,
                     slot_s / cap if cap else 0.0, staleness=k, staleness_max=max(stale[warm:]),
                     per_iteration_s=its)


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


def simulate(cal: Calibration, workload: Workload, schedule: str, rollout_devices: int,
             train_devices: int, staleness: int = 1, shared_prompt: bool = False,
             train_scale: float = 1.0, tp: int | None = ...,  # type: ignore[assignment]
             iterations: int | None = None) -> SimResult:
    """Predict one schedule on a split of rollout_devices + train_devices (sync: colocated on their sum).

    shared_prompt: training processes P + sum(R) tokens per group instead of G*(P+R) (TPSPD still
    counts G*(P+R)); train_scale multiplies every training cost (e.g. 0.8 for the tri-model's saved
    forward); tp: devices per rollout instance (default: the calibration's; None = one instance per
    pool); iterations: batches simulated by bounded_async (default max(8, 4(k+1))).
    """
    if schedule not in SCHEDULES:
        raise UserError(f"schedule {schedule!r}: allowed {', '.join(SCHEDULES)}")
    if rollout_devices < 1 or train_devices < 1:
        raise UserError(f"split {rollout_devices}+{train_devices}: each pool needs >= 1 device")
    if staleness < 0:
        raise UserError(f"staleness {staleness}: must be >= 0")
    kn = Knobs(shared_prompt, train_scale, cal.tp if tp is ... else tp)
    if schedule == "bounded_async":
        return _bounded(cal, workload, rollout_devices, train_devices, staleness, kn, iterations)
    return _independent(cal, workload, schedule, rollout_devices, train_devices, kn)
