"""Build every config and options model's validator now, in the process that imports this module.

The config sections (core/config.py) and the components' options (core/components.py, each
schedule's own) build their pydantic validators at first use (`defer_build`), so that `rlbench
--help`, which imports them, builds none. A process of a run uses them at once (its config is
validated from the recorded one, its components read their options), and a forked process that had
to build them would do so again in each of a cell's processes: ~40-60 ms of CPU a process on a
2-core machine, measured as start-up CPU of every cell. The fork servers import this module last in
their preload list (core/devices/starting.py `PRELOAD`), so the validators are built once in the
server and every process it forks starts with them.
"""
from __future__ import annotations

from pydantic import BaseModel

from rlbench.core import components, config, schedules


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every subclass of `root`, at any depth (the options models of registered components included,
    once their modules are imported)."""
    found, todo = [], list(root.__subclasses__())
    while todo:
        model = todo.pop()
        found.append(model)
        todo.extend(model.__subclasses__())
    return found


def build() -> int:
    """Build the validator of every config section and options model that has none yet; the number
    built."""
    schedules.SCHEDULES  # noqa: B018 - loads each schedule's record, and with it its options model
    built = 0
    for model in (*_models(config.Section), *_models(components.Options)):
        if (
            not model.__pydantic_complete__
            or type(model.__pydantic_validator__).__name__ == "MockValSer"
        ):
            model.model_rebuild(force=True)
            built += 1
    return built


build()
