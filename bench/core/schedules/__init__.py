"""The schedule registry: each schedule is described once, by the `SCHEDULE` record (spec.py) of its own
module here, and registered by one line of REGISTERED.

Config choices, switches in results.json, placement, the loss, the simulator, the calibration, the
ablation tables and `rlbench check` read these records; no other module names a schedule
(tests/test_schedule_registry.py). A record names its engine code by import path (`builder`), imported
only when the schedule is built, so this core package imports no engine.
"""
from __future__ import annotations

import importlib

from rlbench.core.schedules.spec import ScheduleSpec

REGISTERED = (  # one line per schedule, "module:record", in table order
    "rlbench.core.schedules.sync:SCHEDULE",
    "rlbench.core.schedules.periodic_async:SCHEDULE",
    "rlbench.core.schedules.bounded_async:SCHEDULE",
    "rlbench.core.schedules.one_step_off:SCHEDULE",
)


def _load(entry: str) -> ScheduleSpec:
    module, name = entry.split(":")
    return getattr(importlib.import_module(module), name)


SCHEDULES: dict[str, ScheduleSpec] = {s.name: s for s in map(_load, REGISTERED)}


def get(name: str | None) -> ScheduleSpec | None:
    """The record of `name`; None for names of no registered schedule (an external framework's cell)."""
    return SCHEDULES.get(name) if name else None


def of(cfg) -> ScheduleSpec:
    """The record of the config's schedule."""
    return SCHEDULES[cfg.engine.schedule]


def by_role(role: str) -> ScheduleSpec:
    """The schedule that plays `role` (spec.REFERENCE, PERIODIC, BOUNDED) in the built-in tables."""
    return next(s for s in SCHEDULES.values() if s.role == role)


def name_of(role: str) -> str:
    return by_role(role).name


def foreign_options(cfg) -> list[str]:
    """Problems: options another schedule owns (ScheduleSpec.owns) set away from their defaults."""
    selected = of(cfg)
    out = []
    for s in SCHEDULES.values():
        if s is selected:
            continue
        for name in s.owns:
            key = s.options.model_fields[name].json_schema_extra["key"]
            section, field_name = key.split(".")
            sec = getattr(cfg, section)
            if getattr(sec, field_name) != type(sec).model_fields[field_name].default:
                out.append(f"{key}={getattr(sec, field_name)} is an option of engine.schedule={s.name}, not of "
                           f"engine.schedule={selected.name}")
    return out


def switches(cfg) -> dict:
    """What an ablation varies, as results.json records it: the schedule, the two optimisations and every
    schedule's recorded options (the selected schedule's values, the others' `absent` values)."""
    sched = of(cfg)
    out = {"schedule": sched.name, "tri_model": cfg.engine.tri_model, "shared_prompt": cfg.engine.shared_prompt}
    for s in SCHEDULES.values():
        out.update(s.absent)
    own = sched.read(cfg).model_dump()
    out.update({k: own[k] for k in sched.absent})
    if cfg.run.workload:
        out["workload"] = cfg.run.workload
    return out
