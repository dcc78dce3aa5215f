"""The schedules' engines, one folder each (engines/schedules/<name>/: engine.py and its README); a
schedule's record (what it is, its options, its cost model) is in the core
(core/schedules/<name>.py). ENGINES lists each record's engine by import, one line per schedule; the
engine factory (engines/factory.py) builds a cell's schedule from it. Shared by the folders: the
protocols (common.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# the records under other names: this package's folders of the same names become its attributes on
# import
from rlbench.core.schedules import bounded_async as bounded_async_record
from rlbench.core.schedules import one_step_off as one_step_off_record
from rlbench.core.schedules import periodic_async as periodic_async_record
from rlbench.core.schedules import sync as sync_record
from rlbench.core.schedules.spec import ScheduleSpec
from rlbench.engines.schedules.bounded_async import engine as bounded_async_engine
from rlbench.engines.schedules.periodic_async import engine as periodic_async_engine
from rlbench.engines.schedules.sync import engine as sync_engine


@dataclass(frozen=True)
class Engine:
    build: Callable  # build(options, session) -> the schedule, its workers in their processes
    # the whole schedule in the driver's process, where the record's in_process says so: called with
    # (cfg, policy, tok, t0, sink, device, placement, make_model); None: only its trainer runs there
    build_in_process: Callable | None = None


ENGINES: dict[str, Engine] = {  # a record's name -> its engine
    sync_record.SCHEDULE.name: Engine(sync_engine.build, sync_engine.build_in_process),
    periodic_async_record.SCHEDULE.name: Engine(periodic_async_engine.build),
    bounded_async_record.SCHEDULE.name: Engine(bounded_async_engine.build),
    # k pinned to 1 by its record
    one_step_off_record.SCHEDULE.name: Engine(bounded_async_engine.build),
}


def engine_of(spec: ScheduleSpec) -> Engine:
    return ENGINES[spec.name]
