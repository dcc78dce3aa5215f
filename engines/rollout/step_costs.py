"""What one generate call of the built-in sampler measured, for the speedup prediction
(core/costmodel/predict.py)."""
from __future__ import annotations

import time


class StepCosts:
    """Measured costs of one generate call, for the speedup prediction (core/costmodel/predict.py):
    seconds per decode step by sequences in flight and by the shape the step ran at (rows computed:
    the batch bucket; cache positions attended: the window), and per refill (retire finished
    samples, prefill and admit new ones). On CPU the step ends at the host sync that checks for
    finished samples, so these are the device's times; nothing is fitted from them."""

    def __init__(self, buckets: list[int] = (), window_round: int = 0):
        """buckets: the batch sizes a step runs at; window_round: an eager step's window is a
        multiple of this (0: every step attends over the whole cache, as a captured CUDA graph
        does)."""
        self.by_active: dict[int, list] = {}  # B -> [steps, seconds]
        self.by_shape: dict[tuple[int, int], list] = {}  # (bucket rows, window) -> [steps, seconds]
        self.buckets, self.window_round, self.cache_len = list(buckets), window_round, 0
        self.refill_s, self.refills, self.prompts = 0.0, 0, 0
        # partial rollout's mid-generation loads
        self.reload_s, self.reloads, self.recomputed_tokens = 0.0, 0, 0

    def step(self, t: float, active: int, shape: tuple[int, int | None] | None = None,
             cache_len: int = 0) -> float:
        """One decode step of `active` sequences that ran since t; shape: (rows, window) as
        StepRunner.run returns it (window None: the whole cache, cache_len positions)."""
        now = time.perf_counter()
        entry = self.by_active.setdefault(active, [0, 0.0])
        entry[0] += 1
        entry[1] += now - t
        if shape is not None:
            self.cache_len = cache_len
            key = (shape[0], cache_len if shape[1] is None else shape[1])
            entry = self.by_shape.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += now - t
        return now

    def refill(self, t: float, prompts: int = 0) -> float:
        now = time.perf_counter()
        self.refill_s += now - t
        self.refills += 1
        self.prompts += prompts
        return now

    def reload(self, t: float, recomputed: int) -> float:
        now = time.perf_counter()
        self.reload_s += now - t
        self.reloads += 1
        self.recomputed_tokens += recomputed
        return now

    def stats(self) -> dict:
        shapes = {"step_s_by_shape": {f"{b}:{w}": v for (b, w), v in sorted(self.by_shape.items())},
                  "buckets": self.buckets, "window_round": self.window_round,
                  "cache_len": self.cache_len} \
            if self.by_shape else {}
        return {"step_s_by_active": {str(b): v for b, v in sorted(self.by_active.items())},
                **shapes,
                "refill_s": self.refill_s, "refills": self.refills, "reload_s": self.reload_s,
                "reloads": self.reloads, "recomputed_tokens": self.recomputed_tokens}
