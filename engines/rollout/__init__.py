"""Rollout: backends behind one interface (base.py), the workers that host them and the pool that
drives them. What other packages may use: base.py's types, BUILTIN (the built-in backend's spec) and the two functions below."""
from rlbench.engines.rollout.worker import BUILTIN, backend_spec, build_backend

__all__ = ["BUILTIN", "backend_spec", "build_backend"]
