"""A worker's own model copy, and the weights as they travel to it.

- Initial weights: the run's weight file (engines/model/weight_file.py), which every local worker
  maps into memory; a Ray actor gets them through the object store instead (its node may be another
  machine).
- Published weights (weight sync, every version): one block of shared memory that the trainer's rank
  0 (or the driver) writes into and every rollout worker reads from (`SharedState`). One block, not
  one shared tensor per parameter: a process receives a block as one file descriptor, and a fork
  server passes at most a few hundred to a process it starts (a model of several hundred tensors did
  not start).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ALIGN = 64  # byte offsets of the tensors in a block, so that every dtype's view is aligned


@dataclass(frozen=True)
class WeightFile:
    """A safetensors file of the weights (what a worker process receives: a path, not the
    tensors)."""

    path: str

    def read(self) -> dict:
        """name -> CPU tensor, mapped into memory (copy-on-write: nothing reaches the file; each
        call maps it again, so each result's writes stay its own)."""
        # inside: instant path: `rlbench --help` imports this module
        from safetensors.torch import load_file

        return load_file(self.path)


def load_state(weights) -> dict:
    """Weights as they travel -> name -> tensor (on the CPU): a WeightFile mapped into memory, a
    dict (shared-memory views) as it is, a Ray object reference (in a list, so that it is fetched
    here) through the object store."""
    if isinstance(weights, WeightFile):
        return weights.read()
    if isinstance(weights, dict):
        return weights
    # inside: optional dependency (ray), reached on Ray only
    import ray
    from rlbench.engines.ray_util import from_numpy

    return from_numpy(ray.get(weights[0]))


def initial_state(weights) -> dict:
    """The initial weights as a worker builds a model copy from them (build_model's `state`), each
    call a copy of its own: a weight file mapped again (copy-on-write: a copy's writes stay its
    own), anything else copied (a Ray object is read-only memory of the object store)."""
    if isinstance(weights, WeightFile):
        return weights.read()
    return {n: t.clone() for n, t in load_state(weights).items()}


def build_model(model_config, device, state: dict | None = None):
    """The policy's architecture on `device` in eval mode. state (name -> tensor, as load_state
    gives them): its weights; nothing is initialised then (a random initialisation of a 0.5B model
    took 35 s on one core), and on the CPU the parameters are the given tensors themselves (a mapped
    file stays mapped: pages are read when first used and copied only when written). None: randomly
    initialised, for a caller that loads weights before any use."""
    # inside: instant path: `rlbench --help` imports this module
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    dtype = getattr(model_config, "dtype", None) or torch.float32
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if state is None:
        model = AutoModelForCausalLM.from_config(model_config, attn_implementation="sdpa",
                                                 dtype=dtype)
        return model.to(device).eval()
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(model_config, attn_implementation="sdpa",
                                                 dtype=dtype)
    on = {n: t.to(device) for n, t in state.items()}
    result = model.load_state_dict(on, strict=False, assign=True)
    # a tied head (the file holds the embedding once) points at the loaded embedding
    model.tie_weights()
    untied = [n for n in result.missing_keys if n not in _tied(model)]
    if untied:
        raise KeyError(f"weights lack {len(untied)} parameters of the model, e.g. {untied[:3]}")
    return model.to(device).eval()


def _tied(model) -> set[str]:
    """Names of parameters that are another parameter (a tied head): named_parameters lists each
    once."""
    listed = {n for n, _ in model.named_parameters()}
    return {n for n, _ in model.named_parameters(remove_duplicate=False)} - listed


def layout_of(state: dict) -> list[tuple[str, str, tuple, int]]:
    """(name, dtype, shape, byte offset) of each tensor of `state` in one block, offsets aligned to
    ALIGN."""
    out, offset = [], 0
    for name, t in state.items():
        out.append((name, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset))
        offset += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
    return out


def block_size(layout: list) -> int:
    """Bytes of a block laid out as `layout` says."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    if not layout:
        return ALIGN
    _, dtype, shape, offset = layout[-1]
    return offset + max(ALIGN, math.prod(shape)
                        * torch.empty((), dtype=getattr(torch, dtype)).element_size())


def block_views(flat, layout: list) -> list:
    """(name, tensor) views of a byte tensor `flat` [size] laid out as `layout` says."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    out = []
    for name, dtype, shape, offset in layout:
        dt = getattr(torch, dtype)
        nbytes = math.prod(shape) * torch.empty((), dtype=dt).element_size()
        out.append((name, flat[offset:offset + nbytes].view(dt).view(shape)))
    return out


class SharedState(dict):
    """name -> tensor, every tensor a view of one block of shared memory; it travels to another
    process (torch.multiprocessing) as that block and its layout, and arrives as the same views of
    the same memory. The block holds nothing until the first publish writes it (zeros: allocated,
    not copied)."""

    def __init__(self, flat, layout: list):
        super().__init__(block_views(flat, layout))
        self.flat, self.layout = flat, layout

    @classmethod
    def like(cls, state: dict) -> "SharedState":
        """A block with room for every tensor of `state` (same names, shapes and dtypes), on the
        CPU."""
        import torch  # inside: instant path: `rlbench --help` imports this module

        layout = layout_of(state)
        # torch's own shared allocation, no copy
        storage = torch.UntypedStorage._new_shared(block_size(layout))  # noqa: SLF001
        return cls(torch.empty(0, dtype=torch.uint8).set_(storage), layout)

    def __reduce__(self):
        return SharedState, (self.flat, self.layout)
