"""Patching a module the moment it is imported, without importing it earlier.

VERL's modules bind names with `from x import f` at their own import, so a patch of `x.f` must land
before any of them imports `x`; importing every module to patch at `import verl` would cost seconds
in each of VERL's processes (most need few of them). `AfterImport` sits first on sys.meta_path,
finds a watched module as the other finders would, and runs its patches right after the module's own
code has run.
"""
from __future__ import annotations

import importlib.abc
import sys
from typing import Callable


class AfterImport(importlib.abc.MetaPathFinder):
    """sys.meta_path finder: module name -> functions called with the module just after it has
    executed."""

    def __init__(self, patches: dict[str, list[Callable]]):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        spec = next((s for s in (_find(f, name, path, target) for f in sys.meta_path
                                 if f is not self) if s), None)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Patching(spec.loader, self.patches[name])
        return spec


def _find(finder, name, path, target):
    find = getattr(finder, "find_spec", None)
    return find(name, path, target) if find else None


class _Patching(importlib.abc.Loader):
    """The module's own loader, then its patches."""

    def __init__(self, inner, patches: list[Callable]):
        self.inner, self.patches = inner, patches

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        for patch in self.patches:
            patch(module)


def after_import(patches: dict[str, list[Callable]]) -> None:
    """Runs each patch on its module: now where the module is imported already, else when it is."""
    waiting = {}
    for name, fns in patches.items():
        if name in sys.modules:
            for fn in fns:
                fn(sys.modules[name])
        else:
            waiting[name] = fns
    if waiting:
        sys.meta_path.insert(0, AfterImport(waiting))
