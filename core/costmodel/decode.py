"""A decode step's cost and the continuous-batching replay of a rollout worker
(docs/architecture/cost-model.md).

The built-in sampler runs a step at a fixed batch size (the smallest bucket that holds the sequences
in flight) over the cache positions its slots reach, rounded up to a window of 16 (eagerly; a
captured CUDA graph attends over the whole cache): its cost is flat within a bucket and a window,
and grows with both. It records each step's seconds under that shape
(engines/rollout/step_costs.py); `ShapeCost` prices a step of any shape from them, and `replay`
walks a worker's samples step by step, so a step costs what its own bucket and window cost. Results
without the shape table (older runs, vLLM, stated costs) price a step by the sequences in flight
alone (`StepCost`).
"""
from __future__ import annotations

import bisect
import heapq
import itertools
from collections import defaultdict

from rlbench.core.costmodel.counted import priced, replay_counts

# The columns of the plane a step's seconds lie on: a fixed part (weights read, launches), per row
# (the MLP and projections of each sequence), per window position (the mask and positions), per row
# and position (attention over the cache).
_TERMS = ("1", "rows", "window", "rows x window")


def _design(b: float, w: float) -> tuple[float, float, float, float]:
    return 1.0, b, w, b * w


class ShapeCost:
    """Seconds of one decode step by its shape (bucket rows, cache window), from measured (rows,
    window, steps, seconds). The shapes a run measured cost their measured mean in sum: the
    least-squares plane over them, weighted by steps, with an intercept, adds up to the measured
    seconds over the measured steps exactly (the normal equation of the intercept), and prices the
    shapes a run never ran (a larger bucket, another window) along the same plane. Every slope is
    kept >= 0 (a larger step never costs less): where the free fit gives one below 0, the best fit
    without that term."""

    def __init__(self, table: dict, buckets: list[int], window_round: int, cache_len: int,
                 slots: int | None = None):
        """table: {(rows, window): [steps, seconds]}; buckets: the batch sizes a step runs at;
        window_round: the window's rounding (0: every step attends over the whole cache, cache_len
        positions); slots: the sampler's max_num_seqs (a step never runs past the last slot; default
        the largest bucket)."""
        self.buckets, self.round, self.cache_len = sorted(buckets), window_round, cache_len
        self.slots = slots or self.buckets[-1]
        rows = [(b, w, n, s) for (b, w), (n, s) in table.items() if n]
        self.coef = _fit(rows)
        self._memo: dict[tuple[int, int], float] = {}

    def window(self, reach: int) -> int:
        """The cache positions a step attends over when its slots reach `reach` positions."""
        if not self.round:
            return self.cache_len
        return min(self.cache_len or reach + self.round, -(-reach // self.round) * self.round)

    def pieces(self, active: int) -> list[int]:
        """The steps (their bucket rows) that advance `active` sequences, as the sampler lays them
        out (decode_step.layout): steps of the largest bucket, then the smallest bucket that holds
        the rest."""
        top, out, a = self.buckets[-1], [], 0
        while active - a > top:
            out.append(top)
            a += top
        size = self.buckets[bisect.bisect_left(self.buckets, active - a)]
        out.append(min(size, self.slots - a))  # cut at the last slot, as the sampler's layout is
        return out

    def plane(self, rows: int, window: int) -> float:
        return max(0.0, sum(float(c) * x for c, x in zip(self.coef, _design(rows, window))))

    def __call__(self, active: int, reach: int) -> float:
        """Seconds of the step(s) advancing `active` sequences whose slots reach `reach`
        positions."""
        w = self.window(reach)
        got = self._memo.get((active, w))
        if got is None:
            got = self._memo[(active, w)] = sum(self.plane(b, w) for b in self.pieces(active))
        return got


def _fit(rows: list[tuple[int, int, int, float]]):
    """Weighted least squares of mean step seconds on _TERMS, slopes >= 0: of the fits with some
    slope terms left out, the best (least weighted squared error) whose slopes are all >= 0. Terms
    that do not vary over the measured shapes (one window, one bucket) are left out. -> the
    coefficients (numpy)."""
    # inside: a cell process imports this module with the schedules' terms and never fits
    import numpy as np

    if not rows:
        return np.zeros(len(_TERMS))
    x = np.array([_design(b, w) for b, w, _, _ in rows])
    y = np.array([s / n for _, _, n, s in rows])
    wt = np.sqrt(np.array([n for _, _, n, _ in rows], dtype=float))
    rank = np.linalg.matrix_rank
    best, best_err = np.array([float(np.average(y, weights=wt ** 2)), 0.0, 0.0, 0.0]), None
    for k in range(3, -1, -1):
        for terms in itertools.combinations((1, 2, 3), k):
            cols = [0, *terms]
            sub = x[:, cols]
            if rank(sub) < len(cols):
                continue  # a term that does not vary here
            c, *_ = np.linalg.lstsq(sub * wt[:, None], y * wt, rcond=None)
            if (c[1:] < 0).any():
                continue
            err = float(np.sum((wt * (sub @ c - y)) ** 2))
            if best_err is None or err < best_err - 1e-18:
                best = np.zeros(len(_TERMS))
                best[cols] = c
                best_err = err
    return best


class StepCost:
    """Seconds of one decode step, from measured (B, steps, seconds) rows by sequences in flight, or
    by the step's shape where the run recorded it (shapes: a ShapeCost)."""

    def __init__(self, rows: dict, refill_s: float, refills: int, fallback_s: float | None = None,
                 prefill_s_per_token: float = 0.0, shapes: ShapeCost | None = None):
        pts = sorted((int(b), s / n) for b, (n, s) in rows.items() if n)
        self.bs, self.cost = [b for b, _ in pts], [c for _, c in pts]
        self.refill = refill_s / refills if refills else 0.0
        self.fallback = fallback_s
        # seconds per token prefilled again (partial rollout's recompute)
        self.prefill = prefill_s_per_token
        self.shapes = shapes
        # (a, b): every step costs a + b x sequences in flight (stated costs: linear_in_flight); a
        # replay is then priced from its counts (replay_counts), which one replay of a shard gives
        # for every such cost
        self.linear: tuple[float, float] | None = None

    @classmethod
    def linear_in_flight(cls, a: float, b: float, top: int) -> "StepCost":
        """A step costing a + b x B seconds with B sequences in flight (1 <= B <= top): stated costs
        (rlbench plan's logged runs), priced from a replay's counts."""
        out = cls({1: (1, a + b), top: (1, a + b * top)}, 0.0, 0)
        out.linear = (a, b)
        return out

    def __call__(self, b: int) -> float:
        if not self.bs:
            return self.fallback or 0.0
        i = bisect.bisect_left(self.bs, b)
        if i < len(self.bs) and self.bs[i] == b:
            return self.cost[i]
        if i == 0:
            return self.cost[0]
        if i == len(self.bs):
            return self.cost[-1] + self._slope() * (b - self.bs[-1])
        b0, b1, c0, c1 = self.bs[i - 1], self.bs[i], self.cost[i - 1], self.cost[i]
        return c0 + (c1 - c0) * (b - b0) / (b1 - b0)

    def _slope(self) -> float:
        """Seconds per extra sequence in flight beyond the measured counts: the least-squares line
        through the upper half of them (>= 0; 0 with fewer than two)."""
        if getattr(self, "_beyond", None) is None:
            pts = [(b, c) for b, c in zip(self.bs, self.cost) if b >= self.bs[-1] / 2]
            mb, mc = (sum(v) / len(pts) for v in zip(*pts))
            den = sum((b - mb) ** 2 for b, _ in pts)
            self._beyond = max(0.0, sum((b - mb) * (c - mc) for b, c in pts) / den) if den else 0.0
        return self._beyond


def replay(samples: list[dict], slots: int, g: int,
           cost: StepCost) -> tuple[dict[int, float], float]:
    """Continuous batching of one worker's samples as the built-in sampler runs it.

    samples: rows (prompt, sample, response_len, prompt_len) of this worker's prompts. -> (prompt ->
    seconds from the start of the generate call until its group's last sample finished, total
    seconds)."""
    if cost.linear is not None and cost.shapes is None:
        return priced(replay_counts(samples, slots, g), cost)
    done, t, _, _ = replay_posted(samples, slots, g, cost)
    return done, t


def replay_posted(samples: list[dict], slots: int, g: int, cost: StepCost,
                  posts: list[tuple[float, int]] = (),
                  load_s: float = 0.0,
                  recompute: bool = True) -> tuple[dict[int, float], float, list[int], int]:
    """replay with new weights taken mid-generation (partial rollout, core/costmodel/partial.py).

    posts: [(seconds after the generate call started, version)] in time order. Before each decode
    step, the newest version posted by then that the worker lacks is loaded: load_s, plus
    (recompute) the prefill of every sequence in flight (prompt_len + tokens fed so far) at
    cost.prefill seconds per token. A step costs cost.shapes(sequences in flight, positions the
    slots reach) where the run recorded step shapes, else cost(sequences in flight). -> (prompt ->
    seconds until its group's last sample finished, total seconds, the versions loaded, tokens
    recomputed)."""
    pending = sorted(samples, key=lambda s: (s["prompt"], s["sample"]))
    left = {p: g for p in {s["prompt"] for s in pending}}
    done: dict[int, float] = {}
    # heap of (decode step it ends at, admission order, prompt)
    active: list[tuple[int, int, int]] = []
    # admission order -> (decode step it was admitted at, prompt_len)
    started: dict[int, tuple[int, int]] = {}
    # A sequence admitted at step a with a prompt of P tokens feeds position P + (s - a) at step s,
    # so the slots reach max(P - a) + s + 1 positions: a heap of -(P - a), entries of finished ones
    # dropped lazily.
    reach: list[tuple[int, int]] = []
    shapes = cost.shapes
    t, i, step, p = 0.0, 0, 0, 0  # p: the next post not yet taken
    loaded, recomputed = [], 0

    def retire(prompt: int):
        left[prompt] -= 1
        if left[prompt] == 0:
            done[prompt] = t

    def fill():
        nonlocal i, t
        while i < len(pending) and len(active) < slots:
            s = pending[i]
            i += 1
            todo = max(1, int(s["response_len"])) - 1  # the first token is the prefill's
            if todo <= 0:
                retire(s["prompt"])
            else:
                heapq.heappush(active, (step + todo, i, s["prompt"]))
                started[i] = (step, int(s.get("prompt_len", 0)))
                if shapes is not None:
                    heapq.heappush(reach, (step - started[i][1], step + todo))
        t += cost.refill

    def reload():
        nonlocal t, p, recomputed
        # the newest posted by now; older ones are skipped
        while p < len(posts) and posts[p][0] <= t:
            p += 1
        loaded.append(posts[p - 1][1])
        # a sequence admitted at decode step a has fed prompt + (step - a) tokens: those are
        # prefilled again
        tokens = sum(started[order][1] + step - started[order][0]
                     for _, order, _ in active) if recompute else 0
        recomputed += tokens
        t += load_s + tokens * cost.prefill

    fill()
    while active:
        k, c = active[0][0] - step, cost(len(active))
        if shapes is not None:
            while reach[0][1] <= step:  # finished: no longer in a slot
                heapq.heappop(reach)
            far = -reach[0][0]  # max(P - a) over the sequences in flight
        for _ in range(k):  # one addition per decode step, as a step-by-step replay sums them
            if p < len(posts) and posts[p][0] <= t:
                reload()
            if shapes is not None:
                c = shapes(len(active), far + step + 1)
            t += c
            step += 1
        while active and active[0][0] == step:
            retire(heapq.heappop(active)[2])
        fill()
    return done, t, loaded, recomputed


def shape_cost(stats: list[dict]) -> ShapeCost | None:
    """The decode step's cost by shape from one iteration's generate calls (every worker's), or None
    where they did not record shapes (results from before, the vLLM backend)."""
    table: dict = defaultdict(lambda: [0, 0.0])
    shaped = [s for s in stats if s.get("step_s_by_shape")]
    if not shaped:
        return None
    for s in shaped:
        for key, (n, sec) in s["step_s_by_shape"].items():
            b, w = (int(v) for v in key.split(":"))
            table[(b, w)][0] += n
            table[(b, w)][1] += sec
    return ShapeCost(dict(table), shaped[0]["buckets"], int(shaped[0]["window_round"]),
                     max(int(s["cache_len"]) for s in shaped), shaped[0].get("max_num_seqs"))
