"""Rollout: backends behind one interface (base.py), the workers that host them and the pool that
drives them. What other packages may use: base.py's types, EVALUATION (the evaluation sampler's
backend spec) and the two functions below."""
from rlbench.engines.rollout.worker import EVALUATION, backend_spec, build_backend

__all__ = ["EVALUATION", "backend_spec", "build_backend"]
