"""Partial rollout (engine.partial_rollout) in the simulator: bounded staleness k (bounded.py) where
a rollout worker takes new weights between two decode steps instead of at its next batch.

What the engine does (engines/schedules/bounded_async/engine.py, engines/rollout/sampler.py), in
bounded.py's terms and on the same per-device costs, measured in the sync cell
(rlbench.core.costmodel.predict):

- the trainer posts version v the moment it exists (ready[v]: its step, then one weight sync);
- a worker generating its shard checks before every decode step; when a newer version has been
  posted it stops there, loads it (one weight sync) and, with engine.resume_kv=recompute, prefills
  every sequence in flight again (its prompt and the tokens it has fed so far, at the sync refills'
  seconds per prompt token; `keep` skips that), then continues the same sequences: no sequence is
  dropped or drained;
- batches are still dispatched whole and admitted by the same gate, and a worker that holds an older
  version at the start of a batch loads the newest one first, as bounded staleness does.

So partial rollout moves the weight load from the batch boundary into the batch and adds the
recompute; the samples' tokens get fresher (a sample's staleness is its oldest token's). With a
recompute cost of zero and no weight-sync cost, it is bounded staleness exactly; with equal response
lengths too.
"""
from __future__ import annotations

import bisect

from rlbench.core.costmodel.predict import SyncMeasurements


def mid_batch(recompute: bool = True):
    """bounded.py's worker function with partial rollout: versions posted while the worker generates
    are loaded at its next token boundary (costmodel.decode.replay_posted)."""
    def worker(batch: SyncMeasurements, i: int, n: int, start: float, held: int,
               ready: list[float]) -> tuple[list[tuple[float, float]], float, int, int]:
        latest = bisect.bisect_right(ready, start) - 1  # ready: publication times, in version order
        # posted while it was idle: loaded before the batch, as bounded staleness does
        if latest > held:
            start, held = start + batch.split_ws, latest
        first = max(held + 1, bisect.bisect_right(ready, start))
        posts = [(ready[v] - start, v) for v in range(first, len(ready))]
        got, roll = batch.arrivals(i, n)
        # nothing posted while it generates: the batch-start replay
        if not posts or posts[0][0] > roll:
            return [(start + at, cost) for at, cost in got], start + roll, held, held
        done, roll, loaded, _ = batch.replay_posted(i, n, posts, recompute)
        train = batch.group_train_s(i, n)
        got = [(start + at, train[q]) for q, at in done.items()]
        return got, start + roll, held, max([held, *loaded])
    return worker
