"""The one resolver of what rlbench names by import path, "module:attribute": the registries' entries (engine
builders, schedule and experiment records and what they name), the test hooks and the reports' lazy names.
The module is imported when the name is resolved, not before (so the core names upper layers without
importing them, and `rlbench --help` imports neither torch nor pandas); tests/meta/test_structure.py reads these
strings as imports."""
from __future__ import annotations

import importlib
from typing import Any


def resolve(where: str) -> Any:
    """The object `where` ("package.module:attribute") names, its module imported now."""
    module, sep, attribute = where.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"{where!r}: not an import path (module:attribute)")
    return getattr(importlib.import_module(module), attribute)
