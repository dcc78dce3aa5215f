"""What one measured sync iteration says about the devices (SyncMeasurements): decode-step and
refill costs, seconds per unit of training work, optimizer step and weight sync, read from a sync
cell's samples and events. The prediction over them: core/costmodel/predict.py."""
from __future__ import annotations

import statistics
from collections import defaultdict

from rlbench.core.config import RunConfig

from rlbench.core.costmodel.counted import Rows, counts_of, priced_posted, rows_tokens, totals_of
from rlbench.core.costmodel.decode import StepCost, replay, replay_posted, shape_cost
from rlbench.core.costmodel.work import train_tokens, train_work
from rlbench.core.errors import UserError
from rlbench.core.record.stages import PER_SAMPLE_TRAIN_STAGES, Role, Stage, role_of

_TRAIN = set(PER_SAMPLE_TRAIN_STAGES)


def durations(events: list[dict], k: int) -> dict:
    """Iteration k's colocated-rank events -> mean weight sync, mean optimizer step, summed train
    seconds."""
    mine = [e for e in events if e["iteration"] == k and role_of(e["worker"])
            == Role.COLOCATED.value]
    ranks = {e["worker"] for e in mine}
    total = defaultdict(float)
    step = defaultdict(float)  # rank -> optimizer step seconds
    for e in mine:
        total[e["stage"]] += e["end"] - e["start"]
        if e["stage"] == Stage.OPTIMIZER_STEP.value:
            step[e["worker"]] += e["end"] - e["start"]
    n = max(1, len(ranks))
    # The rank that reaches the all-reduce last waits least: its step is the step's cost; the
    # others' also hold their wait for it (the sync bubble), which the replay accounts for by
    # itself.
    return {"ws": total[Stage.WEIGHT_SYNC.value] / n, "opt": min(step.values(), default=0.0),
            "train": sum(v for s, v in total.items() if s in _TRAIN),
            "rollout": total[Stage.ROLLOUT.value] / n, "ranks": len(ranks)}


def split_weight_sync_s(cell: dict, ws: float) -> float:
    """Seconds of one crossing of the weights between split pools (a publish into shared host
    memory, or a rollout worker's load from it) on the sync cell's device. ws: the sync ranks'
    measured weight sync.

    A CPU's crossing is the memory copy a sync rank makes (ws). An accelerator's is the weights'
    bytes (results.json's model parameters x bytes per parameter) over the measured host-copy
    bandwidth (provenance.peak.host_copy_bytes_per_s); ws where either is not recorded (results
    before the probe)."""
    prov, model = cell.get("provenance") or {}, cell.get("model") or {}
    rate = (prov.get("peak") or {}).get("host_copy_bytes_per_s")
    params, width = model.get("parameters"), (model.get("shape") or {}).get("param_bytes")
    if (prov.get("device") or {}).get("type", "cpu") == "cpu" or not (rate and params and width):
        return ws
    return params * width / rate


class SyncMeasurements:
    """What one measured sync iteration says about the devices."""

    def __init__(self, it: dict, samples: list[dict], events: list[dict], stats: list[dict],
                 cfg: RunConfig,
                 shape: dict | None = None, split_ws=None):
        """split_ws: ws -> seconds of one weight crossing between split pools (split_weight_sync_s's
        rule for the cell); None: the sync ranks' weight sync."""
        d = durations(events, it["iteration"])
        if not d["ranks"]:
            raise UserError(f"iteration {it['iteration']}: no colocated-rank events (a sync cell "
                            "of the data-parallel layout is needed)")
        self.n, self.ws, self.opt = d["ranks"], d["ws"], d["opt"]
        self.split_ws = split_ws(self.ws) if split_ws else self.ws
        self.samples, self.tokens, self.iteration = samples, it["tokens"], it["iteration"]
        self.shared_prompt = bool(cfg.engine.shared_prompt)
        self.slots, self.g = cfg.rollout.max_num_seqs, cfg.rollout.group_size
        self.micro_batch = cfg.train.micro_batch_size
        self.shape = shape
        self.c_tok = d["train"] / max(1.0, self.work(samples))  # seconds per unit of train_work
        rows: dict = defaultdict(lambda: [0, 0.0])
        refill_s, refills = 0.0, 0
        for s in stats:
            for b, (n, sec) in (s.get("step_s_by_active") or {}).items():
                rows[b][0] += n
                rows[b][1] += sec
            refill_s += s.get("refill_s") or 0.0
            refills += s.get("refills") or 0
        # once per prompt
        prefilled = sum({s["prompt"]: int(s["prompt_len"]) for s in samples}.values())
        per_token = refill_s / prefilled if prefilled else 0.0
        self.cost = StepCost(dict(rows), refill_s, refills, prefill_s_per_token=per_token,
                             shapes=shape_cost(stats))
        self.measured_rollout = d["rollout"]
        # a split training pool's speed per device over the colocated ranks' (stated)
        self.train_speed = 1.0
        if not rows:  # a backend without a step table (vLLM): every decode step costs the same
            unit = StepCost({}, 0.0, 0, fallback_s=1.0)
            steps = max(replay(self.shard(r, self.n), self.slots, self.g,
                               unit)[1] for r in range(self.n))
            self.cost = StepCost({}, 0.0, 0, fallback_s=d["rollout"] / steps if steps else 0.0)

    @classmethod
    def stated(cls, cost: StepCost, c_tok: float, ws: float, opt: float, slots: int, g: int,
               shared_prompt: bool, samples: list[dict], ranks: int = 1,
               micro_batch: int | None = None,
               shape: dict | None = None, split_ws: float | None = None,
               train_speed: float = 1.0) -> "SyncMeasurements":
        """The same model from given per-device costs instead of a run (rlbench simulate's presets,
        and a measured batch re-dealt to other device counts). samples: rows (prompt, sample,
        prompt_len, response_len); tokens = prompt + response per sample, as TPSPD counts them.
        c_tok: seconds per trained token, or (micro_batch given, a measured batch re-dealt) per unit
        of train_work. split_ws: one weight crossing between split pools (default ws). train_speed:
        a split training pool's speed per device over the colocated ranks' (the trainer ranks' group
        seconds divide by it; sync's do not)."""
        self = cls.__new__(cls)
        self.n, self.ws, self.opt, self.cost, self.c_tok = ranks, ws, opt, cost, c_tok
        self.split_ws = ws if split_ws is None else split_ws
        self.micro_batch, self.shape = micro_batch, shape
        self.slots, self.g, self.shared_prompt, self.samples = slots, g, shared_prompt, samples
        self.tokens = rows_tokens(samples)
        self.measured_rollout, self.iteration = None, None
        self.train_speed = train_speed
        return self

    def _shared(self) -> dict:
        """The memo of what depends on the rows alone: the rows' own (Rows), else this batch's."""
        return self.samples.memo if isinstance(self.samples,
                                               Rows) else self.__dict__.setdefault("_shards", {})

    def shard(self, i: int, of: int) -> list[dict]:
        """The samples of prompts i, i + of, ... (worker i of `of`); memoized: the schedules' terms
        ask for the same shards of a batch many times (bounded staleness cycles through the
        batches)."""
        memo = self._shared()
        if of not in memo:
            memo[of] = [[] for _ in range(of)]  # every worker's shard in one pass
            for s in self.samples:
                memo[of][s["prompt"] % of].append(s)
        return memo[of][i]

    def dealt(self, of: int):
        """The batch's replays on `of` workers without a cost (counted.counts_of), memoized with the
        rows."""
        key = ("counts", of, self.slots, self.g)
        memo = self._shared()
        if key not in memo:
            memo[key] = counts_of(self.samples, of, self.slots, self.g,
                                  lambda: [self.shard(i, of) for i in range(of)])
        return memo[key]

    def counts(self, i: int, of: int):
        """Worker i of `of`'s replay without a cost (counted.replay_counts)."""
        return self.dealt(of).counts(i)

    def _priced_arrivals(self, of: int) -> list[list[tuple[float, float]]]:
        """Every worker of `of`'s arrivals [(when its group finished, its train seconds)] at a
        linear step cost, priced for all groups at once (stated costs; memoized for this cost)."""
        d = self.dealt(of)
        work = self._group_work_all()
        per = self.c_tok / self.train_speed
        out = [[] for _ in range(of)]
        for p, at in zip(d.groups, d.priced(self.cost)):
            out[p % of].append((at, work[p] * per))
        return out

    def rollout_s(self, of: int) -> list[float]:
        """Every worker of `of`'s rollout seconds (the replay's total): from the shards' counted
        totals where the step cost is linear (stated costs), else each worker's replay."""
        if self.cost.linear is not None and self.cost.shapes is None:
            key = ("totals", of, self.slots)
            memo = self._shared()
            if key not in memo:
                memo[key] = totals_of(self.samples, of,
                                      self.slots) or [self.counts(i, of).end for i in range(of)]
            a, b = self.cost.linear
            return [f * self.cost.refill + a * n + b * fl for f, n, fl in memo[key]]
        return [self.arrivals(r, of)[1] for r in range(of)]

    def group_train_s(self, i: int, of: int) -> dict[int, float]:
        """prompt -> the train seconds of its group on a split training pool (train_speed), for
        worker i of `of`'s shard (memoized)."""
        memo = self.__dict__.setdefault("_group_train", {})
        if (i, of) not in memo:
            work = self._group_work(i, of)
            memo[(i, of)] = {p: self.c_tok * w / self.train_speed for p, w in work.items()}
        return memo[(i, of)]

    def _group_work(self, i: int, of: int) -> dict[int, float]:
        """prompt -> its group's training work (train_work), for worker i of `of` (memoized with the
        rows)."""
        work, prompts = self._group_work_all(), self._prompts(i, of)
        return {p: work[p] for p in prompts}

    def _group_work_all(self) -> dict[int, float]:
        """prompt -> its group's training work, every group's (memoized with the rows)."""
        key = ("work", self.shared_prompt, self.micro_batch, id(self.shape))
        memo = self._shared()
        if key not in memo:  # every group's, once for the rows
            groups = defaultdict(list)
            for s in self.samples:
                groups[s["prompt"]].append(s)
            # shape kept: its id
            memo[key] = ({p: self.work(rows) for p, rows in groups.items()}, self.shape)
        return memo[key][0]

    def _prompts(self, i: int, of: int) -> list[int]:
        """The prompts of worker i of `of`'s shard, in order (memoized with the rows)."""
        memo = self._shared()
        if ("prompts", of) not in memo:
            per = [[] for _ in range(of)]
            for p in dict.fromkeys(s["prompt"] for s in self.samples):
                per[p % of].append(p)
            memo[("prompts", of)] = per
        return memo[("prompts", of)][i]

    def shard_train_s(self, of: int) -> list[float]:
        """Every worker of `of`'s training seconds for its shard on a colocated rank (the sum of its
        groups': train_work is counted group by group)."""
        work = self._group_work_all()
        return [self.c_tok * sum(work[p] for p in self._prompts(i, of)) for i in range(of)]

    def arrivals(self, i: int, of: int) -> tuple[list[tuple[float, float]], float]:
        """Worker i of `of` generating its shard from 0 s: [(when a group's last sample finished,
        the group's train seconds)] and its rollout seconds (the replay, memoized for this batch and
        step cost)."""
        memo = self.__dict__.setdefault("_arrivals", {})
        # stated costs: every worker at once
        if self.cost.linear is not None and self.cost.shapes is None:
            key = (of, id(self.cost), self.c_tok, self.train_speed)
            if key not in memo:
                memo[key] = (self._priced_arrivals(of), self.rollout_s(of), self.cost)
            got, total, _ = memo[key]
            return got[i], total[i]
        key = (i, of, id(self.cost))
        if key not in memo:
            done, total = replay(self.shard(i, of), self.slots, self.g, self.cost)
            train = self.group_train_s(i, of)
            memo[key] = ([(at, train[p]) for p, at in done.items()], total, self.cost)
        got, total, _ = memo[key]  # the cost is kept with it, so its id is not reused while cached
        return got, total

    def replay_posted(self, i: int, of: int, posts: list[tuple[float, int]], recompute: bool):
        """Worker i of `of` generating its shard while new weights are posted (partial rollout):
        decode.replay_posted, priced from the shard's counts where the step cost is linear (stated
        costs)."""
        if self.cost.linear is not None and self.cost.shapes is None:
            return priced_posted(self.counts(i, of), self.cost, posts, self.split_ws, recompute)
        return replay_posted(self.shard(i, of), self.slots, self.g, self.cost, posts, self.split_ws,
                             recompute)

    def work(self, rows: list[dict]) -> float:
        return train_work(rows, self.shared_prompt, self.micro_batch, self.shape)

    def train_s(self, rows: list[dict]) -> float:
        """Predicted training seconds of these samples on one device."""
        return self.c_tok * self.work(rows)

    def s_per_token(self) -> float:
        """Training seconds per trained token of this batch (what c_tok was before padding was
        counted)."""
        return self.train_s(self.samples) / max(1, train_tokens(self.samples, self.shared_prompt))

    def sync_time(self, ranks: int | None = None) -> tuple[float, float]:
        """(predicted sync wall time, predicted mean rollout seconds) on `ranks` colocated ranks
        (default: the measured count, the model's in-sample check), each generating and training its
        shard."""
        n = ranks or self.n
        roll = self.rollout_s(n)
        train = self.shard_train_s(n)
        return self.ws + max(a + b for a, b in zip(roll, train)) + self.opt, statistics.fmean(roll)

    def async_time(self, r: int, t: int, overlap: bool = True) -> float:
        """Predicted periodic-async wall time on r rollout workers and t trainer ranks."""
        arrivals = []  # (seconds after the rollout started, train seconds of the group)
        for i in range(r):
            arrivals += self.arrivals(i, r)[0]
        arrivals.sort()
        last = arrivals[-1][0] if arrivals else 0.0
        free = [0.0] * t
        for j, (at, cost) in enumerate(arrivals):
            rank = j % t
            free[rank] = max(free[rank], at if overlap else last) + cost
        return 2 * self.split_ws + max(free + [last]) + self.opt
