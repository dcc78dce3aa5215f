"""sync: VERL's hybrid engine, the reference every speedup is over (engines/schedules/sync.py)."""
from pydantic import Field
from rlbench.core.components import Options
from rlbench.core.schedules.spec import COLOCATED, MODEL_COLOCATED, REFERENCE, ScheduleSpec


class SyncOptions(Options):
    sync_layout: str = Field(json_schema_extra={"key": "engine.sync_layout"})


def _single_process(cfg) -> bool:
    """engine.sync_layout=single_process: every phase in the driver's process (the old layout, kept for
    comparison)."""
    return cfg.engine.sync_layout == "single_process"


SCHEDULE = ScheduleSpec(
    name="sync",
    summary="VERL's hybrid engine: one colocated worker per device generating and training its shard, "
            "gradients all-reduced",
    options=SyncOptions, builder="rlbench.engines.schedules.sync:build", absent={"sync_layout": None},
    layout=COLOCATED, model=MODEL_COLOCATED, role=REFERENCE,
    in_process=_single_process, in_process_builder="rlbench.engines.schedules.sync:build_in_process")
