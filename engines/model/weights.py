"""A worker's own model copy: built from the policy's config on its device, and the weights as they travel
to it (shared-memory tensors for local processes, the Ray object store for Ray actors)."""
from __future__ import annotations


def load_state(weights) -> dict:
    """Weights as they travel -> name -> tensor: shared-memory tensors (local processes) as they are, a
    Ray object reference (in a list, so that it is fetched here) through the object store."""
    if isinstance(weights, dict):
        return weights
    import ray

    from rlbench.engines.ray_util import from_numpy

    return from_numpy(ray.get(weights[0]))


def build_model(model_config, device):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(model_config, attn_implementation="sdpa",
                                             dtype=getattr(model_config, "dtype", None) or torch.float32)
    return model.to(device).eval()
