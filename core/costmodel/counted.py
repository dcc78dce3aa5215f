"""A rollout worker's continuous-batching replay counted once, priced for any decode step whose cost
is linear in the sequences in flight (decode.StepCost.linear: rlbench plan's stated costs).

decode.replay_posted walks a worker's samples step by step and adds each step's seconds as it goes.
Which step a sample is admitted at and finishes at does not depend on what a step costs, only on the
lengths and the slots; so one walk can record, per stretch between two retirements, how many
sequences were in flight and since which step, and a cost a + b x (sequences in flight) then gives
every time by arithmetic. rlbench plan prices every logged step at the ends of every assumption's
range and on every split, and partial rollout inserts weight loads at times that depend on the
trainer: counted, a shard is walked once and each pricing costs a pass over its stretches, not over
its samples.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass


class Rows(list):
    """A batch's sample rows whose shards and cost-free replays (decode.replay_counts) are kept with
    them, so that every SyncMeasurements built on the same rows (rlbench plan prices one logged step
    at several assumed costs) deals and replays them once."""

    def __init__(self, rows=()):
        super().__init__(rows)
        self.memo: dict = {}


def rows_tokens(samples: list[dict]) -> int:
    """Prompt + response tokens of the rows (kept with Rows: every batch on them asks)."""
    memo = samples.memo if isinstance(samples, Rows) else {}
    if "tokens" not in memo:
        memo["tokens"] = sum(int(s["prompt_len"]) + int(s["response_len"]) for s in samples)
    return memo["tokens"]


@dataclass
class Counts:
    """One worker's replay without a cost. done: prompt -> (refills, decode steps, sum over those
    steps of the sequences in flight) when its group's last sample finished; end: the same at the
    end; stretches: per run of steps between two retirements, (first step, refills before it, flight
    sum before it, sequences in flight, sum over them of prompt_len - the step each was admitted
    at)."""
    done: dict[int, tuple[int, int, int]]
    end: tuple[int, int, int]
    stretches: list[tuple[int, int, int, int, int]]


def replay_counts(samples: list[dict], slots: int, g: int) -> Counts:
    """decode.replay_posted's schedule, counted (the module docstring)."""
    if len(samples) <= slots:
        return _all_at_once(samples)
    pending = sorted(samples, key=lambda s: (s["prompt"], s["sample"]))
    left = {p: g for p in {s["prompt"] for s in pending}}
    done: dict[int, tuple[int, int, int]] = {}
    # heap of (decode step it ends at, prompt, prompt_len - admitted at)
    active: list[tuple[int, int, int]] = []
    stretches = []
    # flight: sequences in flight summed over the steps; fed: their P - a
    fills = step = flight = i = fed = 0

    def retire(prompt: int) -> None:
        left[prompt] -= 1
        if not left[prompt]:
            done[prompt] = (fills, step, flight)

    while True:
        while i < len(pending) and len(active) < slots:  # fill, as replay_posted's
            s = pending[i]
            i += 1
            todo = max(1, int(s["response_len"])) - 1  # the first token is the prefill's
            if todo <= 0:
                retire(s["prompt"])
            else:
                heapq.heappush(active,
                               (step + todo, s["prompt"], int(s.get("prompt_len", 0)) - step))
                fed += int(s.get("prompt_len", 0)) - step
        fills += 1
        if not active:
            return Counts(done, (fills, step, flight), stretches)
        k = active[0][0] - step
        stretches.append((step, fills, flight, len(active), fed))
        flight += k * len(active)
        step += k
        while active and active[0][0] == step:
            _, prompt, was = heapq.heappop(active)
            fed -= was
            retire(prompt)


def _all_at_once(samples: list[dict]) -> Counts:
    """replay_counts where every sample has a slot from the start (a shard no larger than
    max_num_seqs, as a log's per-device batch usually is): each finishes at its own length, so the
    stretches are the distinct lengths in order, with a refill after each retirement (as the
    step-by-step replay makes one)."""
    end: dict[int, int] = {}  # prompt -> the decode step its group's last sample finishes at
    # decode step -> [how many finish then, their prompt_len summed]
    by_end: dict[int, list[int]] = {}
    fed = active = 0
    for s in samples:
        todo, pl = max(1, int(s["response_len"])) - 1, int(s.get("prompt_len", 0))
        end[s["prompt"]] = max(end.get(s["prompt"], 0), todo)
        if todo > 0:
            got = by_end.setdefault(todo, [0, 0])
            got[0] += 1
            got[1] += pl
            fed, active = fed + pl, active + 1
    # decode step -> (refills, steps, flight) when the samples ending there retire
    at = {0: (0, 0, 0)}
    stretches, step, flight = [], 0, 0
    for fills, stop in enumerate(sorted(by_end), 1):
        stretches.append((step, fills, flight, active, fed))
        flight += (stop - step) * active
        step = stop
        at[stop] = (fills, step, flight)
        active, fed = active - by_end[stop][0], fed - by_end[stop][1]
    return Counts({p: at[e] for p, e in end.items()}, (len(stretches) + 1, step, flight), stretches)


class Dealt:
    """A batch's replays dealt to `of` workers, counted: per group (in prompt order) its worker and
    its (refills, steps, flight) when it finished; per worker its Counts (built on first use: only
    partial rollout's mid-batch loads walk the stretches)."""

    def __init__(self, groups: list[int], of: int, done: list[tuple[int, int, int]], build):
        self.groups, self.of, self.done, self._build, self._counts = groups, of, done, build, None

    def counts(self, i: int) -> Counts:
        if self._counts is None:
            self._counts = self._build()
        return self._counts[i]

    def priced(self, cost) -> list[float]:
        """When each group finished, in seconds, for a StepCost with `linear` = (a, b)."""
        a, b = cost.linear
        return [f * cost.refill + a * n + b * fl for f, n, fl in self.done]


def counts_of(samples: list[dict], of: int, slots: int, g: int, shards) -> Dealt:
    """replay_counts of every shard i of `of` (shards(): the samples of prompts i, i + of, ...,
    each) at once: where every shard fits its slots, with numpy over the whole batch (_all_at_once's
    arithmetic, one pass instead of one per worker: a plan for 128 GPUs deals each batch to 128 of
    them); else shard by shard."""
    if not _fits(samples, of, slots):
        each = [replay_counts(sh, slots, g) for sh in shards()]
        done = {p: c for counts in each for p, c in counts.done.items()}
        return Dealt(sorted(done), of, [done[p] for p in sorted(done)], lambda: each)
    # inside: cell processes import this module with the schedules' terms and never count
    import numpy as np

    prompt, todo, pl = _arrays(samples)
    shard = prompt % of
    live = todo > 0
    top = int(todo.max()) + 1
    keys, at, n_end = np.unique(shard[live] * top + todo[live], return_inverse=True,
                                return_counts=True)
    pl_end = np.bincount(at, weights=pl[live], minlength=len(keys)).astype(np.int64)
    k_shard, k_end = keys // top, keys % top
    first = np.r_[True, k_shard[1:] != k_shard[:-1]]  # a shard's first stretch
    start = np.where(first, 0, np.r_[0, k_end[:-1]])  # the stretch's first step
    # in flight during the stretch
    active = _segment_total(n_end, k_shard, of) - _exclusive(n_end, first)
    fed = _segment_total(pl_end, k_shard, of) - _exclusive(pl_end, first)
    flight = _exclusive((k_end - start) * active, first)  # flight before the stretch
    fills = _exclusive(np.ones_like(n_end), first) + 1
    after = np.stack([fills, k_end, flight + (k_end - start) * active],
                     axis=1) if len(keys) else np.zeros((1, 3), int)
    order = np.argsort(prompt, kind="stable")
    groups, firsts = np.unique(prompt[order], return_index=True)
    last = np.maximum.reduceat(todo[order], firsts)  # each group's last sample's end
    j = np.minimum(np.searchsorted(keys, (groups % of) * top + last), max(len(keys) - 1, 0))
    done = np.where((last > 0)[:, None], after[j], 0)  # a group of one-token samples: done at once
    stretches = (keys // top, start, fills, flight, active, fed, after)
    return Dealt(groups.tolist(), of, [tuple(c) for c in done.tolist()],
                 lambda: _as_counts(of, groups.tolist(), done.tolist(), stretches))


def totals_of(samples: list[dict], of: int, slots: int) -> list[tuple[int, int, int]] | None:
    """Each shard's Counts.end alone (refills, decode steps, flight), where every shard fits its
    slots: a sample's sequence is in flight for each of its decode steps, so flight is the shard's
    steps summed, and a refill follows each distinct end. None where a shard waits for slots
    (counts_of then)."""
    if not _fits(samples, of, slots):
        return None
    import numpy as np  # inside: as counts_of

    prompt, todo, _ = _arrays(samples)
    shard = prompt % of
    live = todo > 0
    top = int(todo.max()) + 1
    ends = np.bincount(np.unique(shard[live] * top + todo[live]) // top, minlength=of)
    steps = np.zeros(of, np.int64)
    np.maximum.at(steps, shard, todo)
    flight = np.bincount(shard, weights=todo, minlength=of).astype(np.int64)
    return list(zip((ends + 1).tolist(), steps.tolist(), flight.tolist()))


def _fits(samples: list[dict], of: int, slots: int) -> bool:
    """Every shard of `of` has a slot for each of its samples (and there are samples)."""
    if not samples:
        return False
    import numpy as np  # inside: as counts_of

    return int(np.bincount(_arrays(samples)[0] % of).max()) <= slots


def _arrays(samples: list[dict]):
    """The rows' prompt, decode steps after the prefill's token, and prompt_len as numpy arrays
    (kept with the rows where they keep a memo: every device count deals the same rows)."""
    import numpy as np  # inside: as counts_of

    memo = getattr(samples, "memo", {})
    if "arrays" not in memo:
        n = len(samples)
        memo["arrays"] = (np.fromiter((s["prompt"] for s in samples), np.int64, n),
                          np.maximum(1, np.fromiter((int(s["response_len"]) for s in samples),
                                                    np.int64, n)) - 1,
                          np.fromiter((int(s.get("prompt_len", 0)) for s in samples), np.int64, n))
    return memo["arrays"]


def _exclusive(x, first):
    """Per segment (starting where `first`), the sum of x over the entries before each one (numpy
    arrays)."""
    import numpy as np  # inside: as counts_of

    c = np.cumsum(x) - x
    return c - np.maximum.accumulate(np.where(first, c, 0))


def _segment_total(x, seg, n: int):
    """Each entry's segment total of x (segments by id; numpy arrays)."""
    import numpy as np  # inside: as counts_of

    return np.bincount(seg, weights=x, minlength=n)[seg].astype(np.int64) if len(x) else x


def _as_counts(of: int, groups: list[int], done: list, stretches: tuple) -> list[Counts]:
    """counts_of's arrays as one Counts per shard."""
    k_shard, start, fills, flight, active, fed, after = (x.tolist() for x in stretches)
    out = [Counts({}, (1, 0, 0), []) for _ in range(of)]
    for k, row, end in zip(k_shard, zip(start, fills, flight, active, fed), after):
        out[k].stretches.append(row)
        out[k].end = (end[0] + 1, end[1], end[2])
    for p, c in zip(groups, done):
        out[p % of].done[p] = tuple(c)
    return out


def priced(counts: Counts, cost) -> tuple[dict[int, float], float]:
    """decode.replay's (prompt -> when its group finished, total seconds) from the counts, for a
    StepCost with `linear` = (a, b): a step with B sequences in flight costs a + b B."""
    a, b = cost.linear
    at = lambda c: c[0] * cost.refill + a * c[1] + b * c[2]
    # groups finish together, at a stretch's end
    when = {c: at(c) for c in set(counts.done.values())}
    return {p: when[c] for p, c in counts.done.items()}, at(counts.end)


def priced_posted(counts: Counts, cost, posts, load_s: float,
                  recompute: bool) -> tuple[dict, float, list[int], int]:
    """decode.replay_posted's result from the counts (a linear cost): before each decode step, the
    newest version posted by then is loaded (load_s, plus with recompute every sequence in flight
    prefilled again at cost.prefill seconds per token). A load delays every later step and
    retirement; it never reorders them. -> (prompt -> seconds until its group finished, total
    seconds, the versions loaded, tokens recomputed)."""
    a, b = cost.linear
    base = lambda c: c[0] * cost.refill + a * c[1] + b * c[2]
    delays = []  # (the step a load came before, the seconds it added), in order
    delay, p, loaded, recomputed = 0.0, 0, [], 0
    for n, (first, fills, flight, active, fed) in enumerate(counts.stretches):
        if p >= len(posts):
            break  # every post loaded: the rest of the replay is its counts
        last = counts.stretches[n + 1][0] if n + 1 < len(counts.stretches) else counts.end[1]
        # step s starts at t0 + slope (s - first)
        slope, t0 = a + b * active, fills * cost.refill + a * first + b * flight
        if posts[p][0] > t0 + slope * (last - 1 - first) + delay:
            continue  # the next post comes after this stretch's last step has started
        s = first
        while s < last and p < len(posts):
            # loaded before the first step that starts at or after it
            due = posts[p][0] - delay - t0
            if due > 0:
                s = max(s, first + (math.ceil(due / slope) if slope > 0 else last - first))
            if s >= last:
                break
            t = t0 + slope * (s - first) + delay
            if posts[p][0] > t:  # rounding put the step a hair before it: the next one
                s += 1
                continue
            # the newest posted by now; older ones are skipped
            while p < len(posts) and posts[p][0] <= t:
                p += 1
            loaded.append(posts[p - 1][1])
            # a sequence admitted at a has fed P + (s - a) tokens
            tokens = fed + active * s if recompute else 0
            recomputed += tokens
            added = load_s + tokens * cost.prefill
            delay += added
            delays.append((s, added))
            s += 1
    # a load
    when = {c: base(c) + sum(d for at, d in delays if at < c[1]) for c in set(counts.done.values())}
    # delays
    return {q: when[c]
            for q, c in counts.done.items()}, base(counts.end) + delay, loaded, recomputed
    # every retirement after the step it came before
