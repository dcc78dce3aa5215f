"""One clock for a run spread over several machines: each node's monotonic clock mapped to the
driver's.

A stage event's times are read on the node that ran it (core/record/stages.py `now`). On one machine
every process reads the same CLOCK_MONOTONIC; across machines each has its own, started at its own
boot, so events of two nodes line up only once every node's clock is mapped to the driver's. The
driver asks a process on the node for its clock and notes when it asked and when the answer came
(Cristian's method, as NTP's clock filter does it): the node read its clock somewhere inside that
round trip, so

    offset      = remote - (sent + received) / 2        (how far the node's clock is ahead of the
                                                        driver's)
    uncertainty = (received - sent) / 2                 (the true offset lies within offset +-
                                                        uncertainty)

Of several probes the one with the shortest round trip bounds the offset best (queueing inflates a
round trip, never shrinks it), so it is the estimate. The driver estimates again during the run (a
node's clock drifts, by some parts per million), and keeps every estimate: results.json `clocks`.

Pure Python: engines/ray_clock.py probes the nodes and sets each node's offset.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Probe:
    """One round trip: the driver's clock when it asked and when the answer came, the node's clock
    read."""

    sent: float
    remote: float
    received: float

    @property
    def rtt(self) -> float:
        return self.received - self.sent


@dataclass(frozen=True)
class Estimate:
    at: float  # the driver's clock (the run's time axis, seconds since the cell's start)
    offset_s: float  # the node's clock minus the driver's
    # half the best probe's round trip: the true offset is within offset +- this
    uncertainty_s: float
    rtt_s: float
    probes: int


def estimate(probes: list[Probe], t0: float = 0.0) -> Estimate:
    """The offset of the probe with the shortest round trip (ValueError where there is none)."""
    if not probes:
        raise ValueError("no clock probe answered")
    best = min(probes, key=lambda p: p.rtt)
    mid = (best.sent + best.received) / 2
    return Estimate(best.received - t0, best.remote - mid, best.rtt / 2, best.rtt, len(probes))


def record(estimates: list[Estimate], node: dict) -> dict:
    """A node's entry of results.json `clocks`: who it is, its last estimate and every one made, and
    how far the estimates moved over the run (drift plus noise; within twice the uncertainty: no
    drift seen)."""
    last = estimates[-1]
    offsets = [e.offset_s for e in estimates]
    return {**node, "offset_s": last.offset_s, "uncertainty_s": last.uncertainty_s,
            "moved_s": max(offsets) - min(offsets), "estimates": [asdict(e) for e in estimates]}
