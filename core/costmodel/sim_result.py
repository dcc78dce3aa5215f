"""What the cost model predicts for one schedule (SimResult), and the rate of a schedule whose
iterations do not overlap (median_rate): shared by the cost model's terms (colocated.py, pools.py,
bounded.py) and simulate.py, which picks the term."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from rlbench.core.costmodel.predict import SyncMeasurements


@dataclass
class SimResult:
    schedule: str
    rollout_devices: int  # sync: the colocated ranks are rollout_devices + train_devices
    train_devices: int
    devices: int  # TPSPD divisor: every device of the run
    tpspd: float  # tokens / (s * device): median over batches (bounded: steady-state rate)
    iter_s: float  # median seconds per iteration (bounded: steady-state mean)
    overlap: bool = True  # periodic_async: False = the barrier variant
    staleness: int | None = None  # bounded_async: k
    staleness_max: int = 0  # bounded_async: largest (trained version - behaviour version)
    partial_rollout: bool = False  # bounded_async: new weights taken mid-generation (partial.py)
    per_iteration_s: list[float] = field(default_factory=list)
    # seconds per iteration the link adds, by term
    link_s: dict[str, float] = field(default_factory=dict)

    @property
    def link_share(self) -> float:
        """The link's share of an iteration (0 on one node)."""
        return sum(self.link_s.values()) / self.iter_s if self.iter_s > 0 else 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def median_rate(schedule: str, batches: list[SyncMeasurements], n: int, m: int, walls: list[float],
                overlap: bool = True) -> SimResult:
    """A schedule whose iterations do not overlap: TPSPD = the median over batches of tokens / (wall
    x devices), as the runner reports it."""
    d = n + m
    tpspd = statistics.median(b.tokens / (w * d) for b, w in zip(batches, walls))
    return SimResult(schedule, n, m, d, tpspd, statistics.median(walls), overlap=overlap,
                     per_iteration_s=walls)
