"""Rollout: backends behind one interface (base.py), the workers that host them and the pool that
drives them. What other packages may use: base.py's types and the two functions below."""
from rlbench.engines.rollout.worker import backend_spec, build_backend

__all__ = ["backend_spec", "build_backend"]
