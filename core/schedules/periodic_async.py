"""periodic_async: the paper's producer/consumer inside one iteration.

This record says what it is, its options and its cost model (core/costmodel/pools.py); its engine is
engines/schedules/periodic_async/ (engine.py and its README).
"""
from pydantic import Field
from rlbench.core.components import Options
from rlbench.core.schedules.spec import (MODEL_POOLS, PERIODIC, POOLS, ScheduleSpec,
                                         one_step_per_iteration)
from rlbench.core.schedules.options import CONSUME_ORDER, ConsumeOrder


class PeriodicAsyncOptions(Options):
    overlap: bool = Field(
        True,
        description="periodic_async: train each group as it arrives (the paper). false: the "
                    "barrier "
        "variant, same processes and devices but training starts when the iteration's last group "
        "has arrived, which separates what the device split gives from what overlap gives.",
        json_schema_extra={"key": "engine.overlap"})
    consume_order: ConsumeOrder = CONSUME_ORDER


SCHEDULE = ScheduleSpec(
    name="periodic_async",
    summary="a rollout pool feeds finished groups to a training pool inside each iteration "
            "(producer/consumer), weights synced at the iteration start",
    options=PeriodicAsyncOptions,
    checks=(one_step_per_iteration("periodic_async",
                                   "the paper's on-policy equivalence holds for one optimizer "
                                   "step per iteration (the whole batch); several mini-batch steps "
                                   "would need groups that have not been generated yet"),),
    layout=POOLS, model=MODEL_POOLS, role=PERIODIC)
