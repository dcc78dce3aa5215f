"""Partial rollout (engine.partial_rollout) in the simulator: bounded staleness k (bounded.py) where a
rollout worker takes new weights between two decode steps instead of at its next batch.

What the engine does (engines/schedules/bounded_async.py, engines/rollout/sampler.py), in bounded.py's
terms and on the same per-device costs, measured in the sync cell (rlbench.costmodel.predict):

- the trainer posts version v the moment it exists (ready[v]: its step, then one weight sync);
- a worker generating its shard checks before every decode step; when a newer version has been posted
  it stops there, loads it (one weight sync) and, with engine.resume_kv=recompute, prefills every sequence
  in flight again (its prompt and the tokens it has fed so far, at the sync refills' seconds per prompt
  token; `keep` skips that), then continues the same sequences: no sequence is dropped or drained;
- batches are still dispatched whole and admitted by the same gate, and a worker that holds an older
  version at the start of a batch loads the newest one first, as bounded staleness does.

So partial rollout moves the weight load from the batch boundary into the batch and adds the recompute;
the samples' tokens get fresher (a sample's staleness is its oldest token's). With a recompute cost of zero
and no weight-sync cost, it is bounded staleness exactly; with equal response lengths too.
"""
from __future__ import annotations

import heapq
from collections import defaultdict

from rlbench.costmodel.predict import StepCost, SyncMeasurements, train_tokens


def replay_partial(samples: list[dict], slots: int, g: int, cost: StepCost, posts: list[tuple[float, int]],
                   load_s: float, recompute: bool = True) -> tuple[dict[int, float], float, list[int], int]:
    """predict.replay with new weights taken mid-generation.

    posts: [(seconds after the generate call started, version)] in time order. Before each decode step,
    the newest version posted by then that the worker lacks is loaded: load_s, plus (recompute) the prefill
    of every sequence in flight (prompt_len + tokens fed so far) at cost.prefill seconds per token.
    -> (prompt -> seconds until its group's last sample finished, total seconds, the versions loaded, tokens
    recomputed)."""
    pending = sorted(samples, key=lambda s: (s["prompt"], s["sample"]))
    left = {p: g for p in {s["prompt"] for s in pending}}
    done: dict[int, float] = {}
    active: list[tuple[int, int, int]] = []  # heap of (decode step it ends at, admission order, prompt)
    started: dict[int, tuple[int, int]] = {}  # admission order -> (decode step it was admitted at, prompt_len)
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
                started[i] = (step, int(s["prompt_len"]))
        t += cost.refill

    def reload():
        nonlocal t, p, recomputed
        while p < len(posts) and posts[p][0] <= t:  # the newest posted by now; older ones are skipped
            p += 1
        loaded.append(posts[p - 1][1])
        # a sequence admitted at decode step a has fed prompt + (step - a) tokens: those are prefilled again
        tokens = sum(started[order][1] + step - started[order][0] for _, order, _ in active) if recompute else 0
        recomputed += tokens
        t += load_s + tokens * cost.prefill

    fill()
    while active:
        k, c = active[0][0] - step, cost(len(active))
        for _ in range(k):  # one addition per decode step, as predict.replay
            if p < len(posts) and posts[p][0] <= t:
                reload()
            t += c
            step += 1
        while active and active[0][0] == step:
            retire(heapq.heappop(active)[2])
        fill()
    return done, t, loaded, recomputed


def mid_batch(recompute: bool = True):
    """bounded.py's worker function with partial rollout: versions posted while the worker generates are
    loaded at its next token boundary (replay_partial)."""
    def worker(batch: SyncMeasurements, i: int, n: int, start: float, held: int,
               ready: list[float]) -> tuple[list[tuple[float, float]], float, int, int]:
        latest = max(v for v, t in enumerate(ready) if t <= start)
        if latest > held:  # posted while it was idle: loaded before the batch, as bounded staleness does
            start, held = start + batch.ws, latest
        posts = [(t - start, v) for v, t in enumerate(ready) if v > held and t > start]
        shard = batch.shard(i, n)
        done, roll, loaded, _ = replay_partial(shard, batch.slots, batch.g, batch.cost, posts, batch.ws, recompute)
        groups = defaultdict(list)
        for s in shard:
            groups[s["prompt"]].append(s)
        got = [(start + at, batch.c_tok * train_tokens(groups[q], batch.shared_prompt)) for q, at in done.items()]
        return got, start + roll, held, max([held, *loaded])
    return worker
