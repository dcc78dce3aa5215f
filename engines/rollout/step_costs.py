"""What one generate call of the built-in sampler measured, for the speedup prediction (bench/core/costmodel/predict.py)."""
from __future__ import annotations

import time


class StepCosts:
    """Measured costs of one generate call, for the speedup prediction (bench/core/costmodel/predict.py): seconds per
    decode step by sequences in flight, and per refill (retire finished samples, prefill and admit new
    ones). On CPU the step ends at the host sync that checks for finished samples, so these are the
    device's times; nothing is fitted from them."""

    def __init__(self):
        self.by_active: dict[int, list] = {}  # B -> [steps, seconds]
        self.refill_s, self.refills, self.prompts = 0.0, 0, 0
        self.reload_s, self.reloads, self.recomputed_tokens = 0.0, 0, 0  # partial rollout's mid-generation loads

    def step(self, t: float, active: int) -> float:
        now = time.perf_counter()
        entry = self.by_active.setdefault(active, [0, 0.0])
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
        return {"step_s_by_active": {str(b): v for b, v in sorted(self.by_active.items())},
                "refill_s": self.refill_s, "refills": self.refills, "reload_s": self.reload_s,
                "reloads": self.reloads, "recomputed_tokens": self.recomputed_tokens}
