"""bounded_async: rollout up to k weight versions ahead, trained with the decoupled PPO loss; with
partial rollout, new weights taken mid-generation.

This record says what it is, its options and its cost model (core/costmodel/bounded.py and
partial.py); its engine is engines/schedules/bounded_async/ (engine.py, which makes the
partial-rollout mailbox and the rollout gate it needs, and its README).
"""
from typing import Literal

from pydantic import Field
from rlbench.core.components import BACKENDS, Options
from rlbench.core.schedules.spec import (BOUNDED, DECOUPLED, MODEL_BOUNDED, POOLS, ScheduleSpec,
                                         one_step_per_iteration)
from rlbench.core.schedules.options import (CONSUME_ORDER, MAX_STALENESS, PROX_LOGP, ConsumeOrder,
                                               ProxLogp)


class BoundedAsyncOptions(Options):
    max_staleness: int = MAX_STALENESS
    prox_logp: ProxLogp = PROX_LOGP
    consume_order: ConsumeOrder = CONSUME_ORDER
    partial_rollout: bool = Field(
        False,
        description="bounded_async: partial rollout (verl's fully-async partial_rollout, AReaL's "
        "interruptible generation): after every optimizer step the rollout workers load the new "
        "weights at their next token boundary and continue the sequences in flight, so one "
        "response holds tokens of several versions; each token's version is recorded and the "
        "decoupled loss uses it. Built-in sampler and local workers only.",
        json_schema_extra={"key": "engine.partial_rollout"})
    resume_kv: Literal["recompute", "keep"] = Field(
        "recompute",
        description="partial_rollout: after new weights mid-sequence, recompute the K/V of "
        "each sequence's prefix under them (what AReaL and verl do: interrupted requests are "
        "resubmitted with their partial output) or keep the stale cache (vLLM's "
        "pause_generation(mode='keep') without clearing it).",
        json_schema_extra={"key": "engine.resume_kv"})


def _partial_rollout_where_supported(cfg) -> str | None:
    """Partial rollout polls shared memory between decode steps: a backend that takes weights
    mid-generation, in local workers."""
    able = [b.name for b in BACKENDS.values() if b.weights_mid_generation]
    if cfg.engine.partial_rollout and (cfg.rollout.backend not in able or cfg.engine.launcher
                                       != "local"):
        return (f"engine.partial_rollout needs rollout.backend={' or '.join(able)} and "
                f"engine.launcher=local (got rollout.backend={cfg.rollout.backend}, "
                f"engine.launcher={cfg.engine.launcher}): the worker takes new "
                "weights between decode steps from shared memory; the vLLM backend drives vLLM's "
                "synchronous engine, which cannot pause a request mid-generation")
    return None


SCHEDULE = ScheduleSpec(
    name="bounded_async",
    summary="rollout runs up to engine.max_staleness weight versions ahead of training "
            "(AReaL-style), trained with the decoupled PPO loss",
    options=BoundedAsyncOptions,
    checks=(one_step_per_iteration("bounded_async",
                                   "it consumes groups as they arrive and takes one optimizer step "
                                   "per iteration, like periodic_async"),
            _partial_rollout_where_supported),
    owns=("partial_rollout", "resume_kv"),
    layout=POOLS, model=MODEL_BOUNDED, loss=DECOUPLED, runs_ahead=True, role=BOUNDED)
