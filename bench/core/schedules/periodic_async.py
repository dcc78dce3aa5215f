"""periodic_async: the paper's producer/consumer inside one iteration (engines/schedules/periodic_async.py)."""
from pydantic import Field
from rlbench.core.components import Options
from rlbench.core.schedules.spec import MODEL_POOLS, PERIODIC, POOLS, ScheduleSpec, one_step_per_iteration


class PeriodicAsyncOptions(Options):
    overlap: bool = Field(json_schema_extra={"key": "engine.overlap"})
    consume_order: str = Field(json_schema_extra={"key": "engine.consume_order"})


SCHEDULE = ScheduleSpec(
    name="periodic_async",
    summary="a rollout pool feeds finished groups to a training pool inside each iteration "
            "(producer/consumer), weights synced at the iteration start",
    options=PeriodicAsyncOptions, builder="rlbench.engines.schedules.periodic_async:build",
    absent={"overlap": None},
    checks=(one_step_per_iteration("periodic_async", "the paper's on-policy equivalence holds for one optimizer "
                                   "step per iteration (the whole batch); several mini-batch steps would need "
                                   "groups that have not been generated yet"),),
    layout=POOLS, model=MODEL_POOLS, role=PERIODIC)
