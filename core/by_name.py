"""The one resolver of a name by import path, "module:attribute", for what the code must not import:
the test hooks the hook points load in a process that asks for one (core/hooks.py). The registries
list their entries by import; tests/meta/test_structure.py reads these strings as imports and allows
a few, each with its reason."""
from __future__ import annotations

import importlib
from typing import Any


def resolve(where: str) -> Any:
    """The object `where` ("package.module:attribute") names, its module imported now."""
    module, sep, attribute = where.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"{where!r}: not an import path (module:attribute)")
    return getattr(importlib.import_module(module), attribute)
