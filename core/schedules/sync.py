"""sync: VERL's hybrid engine, the reference every speedup is over.

This record says what it is, its options with their defaults and help, its place in the tables and
its cost model (core/costmodel/colocated.py); its engine is engines/schedules/sync/ (engine.py and
its README).
"""
from typing import Literal

from pydantic import Field
from rlbench.core.components import Options
from rlbench.core.schedules.spec import COLOCATED, MODEL_COLOCATED, REFERENCE, ScheduleSpec


class SyncOptions(Options):
    sync_layout: Literal["data_parallel", "single_process"] = Field(
        "data_parallel",
        description="sync only. data_parallel: one pinned colocated worker per device, "
        "gradients all-reduced (VERL's layout, the fair baseline); single_process: every phase in "
        "one process with all devices (CPU: as many intra-op threads), kept only to show what a "
        "worse layout costs.",
        json_schema_extra={"key": "engine.sync_layout"})


def _single_process(cfg) -> bool:
    """engine.sync_layout=single_process: every phase in the driver's process (the old layout, kept
    for comparison)."""
    return cfg.engine.sync_layout == "single_process"


SCHEDULE = ScheduleSpec(
    name="sync",
    summary="VERL's hybrid engine: one colocated worker per device generating and training its "
            "shard, gradients all-reduced",
    options=SyncOptions, layout=COLOCATED, model=MODEL_COLOCATED, role=REFERENCE,
    in_process=_single_process)
