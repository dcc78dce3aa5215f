"""bounded_async: rollout up to k weight versions ahead, decoupled PPO loss (engines/schedules/bounded_async.py)."""
from pydantic import Field
from rlbench.components import Options
from rlbench.schedules.spec import BOUNDED, DECOUPLED, MODEL_BOUNDED, POOLS, ScheduleSpec, one_step_per_iteration


class BoundedAsyncOptions(Options):
    max_staleness: int = Field(json_schema_extra={"key": "engine.max_staleness"})
    prox_logp: str = Field(json_schema_extra={"key": "train.prox_logp"})
    consume_order: str = Field(json_schema_extra={"key": "engine.consume_order"})


SCHEDULE = ScheduleSpec(
    name="bounded_async",
    summary="rollout runs up to engine.max_staleness weight versions ahead of training (AReaL-style), trained "
            "with the decoupled PPO loss",
    options=BoundedAsyncOptions, builder="rlbench.engines.schedules.bounded_async:build",
    absent={"max_staleness": 0, "prox_logp": None},
    checks=(one_step_per_iteration("bounded_async", "it consumes groups as they arrive and takes one optimizer "
                                   "step per iteration, like periodic_async"),),
    layout=POOLS, model=MODEL_BOUNDED, loss=DECOUPLED, runs_ahead=True, role=BOUNDED)
