"""Options that several schedules read, each declared once: its type, default, help text and config
key. A schedule's options model (its record, core/schedules/<name>.py) lists the ones it reads; the
config section derives from those models (core/config.py), and a default is every ablation cell's
"off" value."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

ConsumeOrder = Literal["arrival", "dispatch"]
ProxLogp = Literal["recompute", "loglinear"]

CONSUME_ORDER = Field(
    "arrival",
    description="periodic_async, bounded_async: train groups as they finish (arrival) or in "
                "dispatch "
    "order.", json_schema_extra={"key": "engine.consume_order"})
MAX_STALENESS = Field(
    1, ge=0,
    description="bounded_async: k, the most weight versions a trained sample may lag the trained "
                "weights "
    "(0: on-policy, 1: one-step-off).", json_schema_extra={"key": "engine.max_staleness"})
PROX_LOGP = Field(
    "recompute",
    description="bounded_async (decoupled PPO loss): how pi_prox is obtained. recompute: a "
    "forward pass of the weights at the start of the step; loglinear (A-3PO): log pi_prox = log "
    "pi_behav + alpha (log pi_theta - log pi_behav), alpha = (d - 1) / d for staleness d >= 1, 0 "
    "for d = 0; no pass.",
    json_schema_extra={"key": "train.prox_logp"})
