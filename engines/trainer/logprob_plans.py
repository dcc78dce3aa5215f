"""How the trainer gets policy, old-policy and reference log-probs: a component picked by the
config.

- SeparatePasses: VERL's three separately scheduled phases (old_logprob, ref_logprob, update).
- TriModel (engine.tri_model): one module holding the three parameter sets, one call per micro-batch
  over one data path. On-policy, the old policy *is* the current policy at the first (only) pass of
  the iteration, so the old log-probs are the detached policy log-probs and that forward is skipped.

The sequence layout (engine.shared_prompt, engine.shared_prompt_impl) is a second, independent
component: `logprob_fn`, the same call whatever it does: unpacked rows, a packed group (PACKED
below, by the names of core/components.py PACKING_IMPLS), or `AutoLayout`, which picks one of the
two per group by the cost model.
"""
from __future__ import annotations

import torch

from rlbench.core import components
from rlbench.core.costmodel import packing as cost
from rlbench.core.devices import device as devices
from rlbench.core.devices import peak
from rlbench.core.errors import UserError
from rlbench.core.results.utilisation import model_shape
from rlbench.engines.trainer import packing, packing_dense
from rlbench.engines.trainer.packing import unpacked_logprobs

# engine.shared_prompt_impl -> its function (model, prompt_ids, responses, temperature) -> G tensors
# [R_i]; the names and what each can train on are the records' (core/components.py PACKING_IMPLS)
PACKED = {"dense": packing_dense.packed_logprobs_dense, "gather": packing.packed_logprobs,
          "mask4d": packing.packed_logprobs_mask4d, "flex": packing.packed_logprobs_flex}


def make_logprob_fn(shared_prompt: bool | str, impl: str = "dense", model=None):
    """(model, prompt_ids, responses, temperature) -> list of [R_i] response-token log-probs.

    shared_prompt: False (unpacked rows), True (every group packed by `impl`) or "auto" (AutoLayout,
    which needs the model, on its device, to weigh the two)."""
    if shared_prompt is False:
        return unpacked_logprobs
    if model is not None:
        kind = model.device.type
        problem = components.packing_impl_problem(impl, kind)
        if problem:  # engine.device=auto resolved to a device the config could not know
            raise UserError(problem)
    packed = PACKED[impl]
    return packed if shared_prompt is True else AutoLayout(model, impl, packed)


class AutoLayout:
    """engine.shared_prompt=auto: per group, the packed layout where the cost model predicts its
    training pass at least cost.MARGIN faster on this device, the unpacked rows elsewhere; both give
    the same log-probs. One decision per group covers all its passes (old, reference, update), so a
    group's log-probs of every pass come from one layout."""

    def __init__(self, model, impl: str, packed):
        self.impl, self.packed = impl, packed
        self.shape = model_shape(model)
        threads = torch.get_num_threads()
        measured = peak.peak(model.device, model.dtype, threads=threads)
        attention = peak.attention_peak(model.device, model.dtype, self.shape["head_dim"],
                                        threads=threads)
        self.device = cost.Device.from_peak(measured, devices.host_waits_for_kernels(model.device),
                                            attention)

    def choose(self, prompt_ids: list[int], responses: list[list[int]]) -> cost.Choice:
        return cost.choose(self.shape, self.device, self.impl, len(prompt_ids),
                           [len(r) for r in responses])

    def __call__(self, model, prompt_ids, responses,
                 temperature: float = 1.0) -> list[torch.Tensor]:
        fn = self.packed if self.choose(prompt_ids, responses).packed else unpacked_logprobs
        return fn(model, prompt_ids, responses, temperature)


class SeparatePasses:
    separate_phases = True

    def __init__(self, logprob_fn, temperature: float):
        self.fn, self.temperature = logprob_fn, temperature

    def old_logprobs(self, policy, mb) -> list[torch.Tensor]:
        return [x.detach() for x in mb.logprobs(self.fn, policy, self.temperature)]

    def ref_logprobs(self, ref, mb) -> list[torch.Tensor]:
        return [x.detach() for x in mb.logprobs(self.fn, ref, self.temperature)]

    def update_logprobs(self, policy, ref, mb):
        logp = mb.logprobs(self.fn, policy, self.temperature)
        return logp, mb.old, mb.ref


class TriModel:
    """Policy (with grad), old and reference log-probs of a micro-batch in one call."""

    separate_phases = False

    def __init__(self, logprob_fn, temperature: float):
        self.fn, self.temperature = logprob_fn, temperature

    def update_logprobs(self, policy, ref, mb):
        logp = mb.logprobs(self.fn, policy, self.temperature)
        old = [x.detach() for x in logp]  # old == current policy: skip its forward
        with torch.no_grad():
            ref_lp = mb.logprobs(self.fn, ref, self.temperature)
        return logp, old, ref_lp


def make_plan(engine_cfg, temperature: float, model=None):
    """The plan the config asks for; model: the policy (auto weighs its shape on its device)."""
    fn = make_logprob_fn(engine_cfg.shared_prompt, engine_cfg.shared_prompt_impl, model)
    return (TriModel if engine_cfg.tri_model else SeparatePasses)(fn, temperature)
