"""The schedule registry: each schedule's record (`SCHEDULE` in core/schedules/<name>.py, a
ScheduleSpec of spec.py) says what it is, which options it reads (their defaults and help text), its
place in the tables and its cost model (core/costmodel/simulate.py TERMS); its engine is a folder of
engines/schedules/, found by the record's name there (engines/schedules/__init__.py). SCHEDULES
lists the records by import, one line each.

Config choices and sections, switches in results.json, placement, the loss, the simulator, the
calibration, the ablation tables and `rlbench check` read these records; no other module names a
schedule (tests/unit/core/test_schedule_registry.py). Records are light (no torch): the core imports
no engine.
"""
from __future__ import annotations

from rlbench.core.components import option_fields as fields_of
from rlbench.core.schedules import bounded_async, one_step_off, periodic_async, sync
from rlbench.core.schedules.spec import ScheduleSpec

SCHEDULES: dict[str, ScheduleSpec] = {s.name: s for s in (  # one line per schedule, in table order
    sync.SCHEDULE,
    periodic_async.SCHEDULE,
    bounded_async.SCHEDULE,
    one_step_off.SCHEDULE,
)}


def get(name: str | None) -> ScheduleSpec | None:
    """The record of `name`; None for names of no registered schedule (an external framework's
    cell)."""
    return SCHEDULES.get(name) if name else None


def of(cfg) -> ScheduleSpec:
    """The record of the config's schedule."""
    return SCHEDULES[cfg.engine.schedule]


def by_role(role: str) -> ScheduleSpec:
    """The schedule that plays `role` (spec.REFERENCE, PERIODIC, BOUNDED) in the built-in tables."""
    return next(s for s in SCHEDULES.values() if s.role == role)


def name_of(role: str) -> str:
    return by_role(role).name


def option_fields(section: str) -> dict:
    """The schedules' options under a config section ("engine", "train"), each once, as pydantic
    fields: the config section is made of them (core/config.py). An option several schedules read is
    one shared declaration (core/schedules/options.py)."""
    return fields_of(SCHEDULES.values(), section)


def option_keys() -> dict[str, str]:
    """Every schedule option's name -> its config key ("engine.overlap", "train.prox_logp", ...)."""
    return {n: key for spec in SCHEDULES.values() for n, key in spec.options.keys().items()}


def foreign_options(cfg) -> list[str]:
    """Problems: an option another schedule owns (ScheduleSpec.owns) set away from its default
    (refused, never silently ignored)."""
    selected = of(cfg)
    out = []
    for s in SCHEDULES.values():
        if s is selected:
            continue
        for name in s.owns:
            section, field_name = s.options.keys()[name].split(".")
            value, default = getattr(getattr(cfg, section),
                                     field_name), s.options.model_fields[name].default
            if value != default:
                out.append(f"{section}.{field_name}={value} is an option of "
                           f"engine.schedule={s.name}, not of engine.schedule={selected.name}")
    return out


def switches(cfg) -> dict:
    """What an ablation varies, as results.json records it: the schedule, the two optimisations and
    the options the schedule runs with (pinned ones at their pinned values); another schedule's
    options do not apply and are not recorded."""
    sched = of(cfg)
    out = {"schedule": sched.name, "tri_model": cfg.engine.tri_model,
           "shared_prompt": cfg.engine.shared_prompt,
           **sched.read(cfg).model_dump()}
    if cfg.engine.shared_prompt is not False:  # how it packs: recorded only where it packs
        out["shared_prompt_impl"] = cfg.engine.shared_prompt_impl
    if cfg.run.workload:
        out["workload"] = cfg.run.workload
    return out
