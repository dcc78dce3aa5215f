"""How the trainer gets policy, old-policy and reference log-probs: a component picked by the config.

- SeparatePasses: VERL's three separately scheduled phases (old_logprob, ref_logprob, update).
- TriModel (engine.tri_model): one module holding the three parameter sets, one call per micro-batch
  over one data path. On-policy, the old policy *is* the current policy at the first (only) pass of
  the iteration, so the old log-probs are the detached policy log-probs and that forward is skipped.

The sequence layout (engine.shared_prompt) is a second, independent component: `logprob_fn`.
"""
from __future__ import annotations

import torch

from rlbench.engines.trainer.packing import packed_logprobs, unpacked_logprobs


def make_logprob_fn(shared_prompt: bool):
    """(model, prompt_ids, responses, temperature) -> list of [R_i] response-token log-probs."""
    return packed_logprobs if shared_prompt else unpacked_logprobs


class SeparatePasses:
    separate_phases = True

    def __init__(self, logprob_fn, temperature: float):
        self.fn, self.temperature = logprob_fn, temperature

    def old_logprobs(self, policy, mb) -> list[torch.Tensor]:
        return [x.detach() for x in self.fn(policy, mb.prompt_ids, mb.responses, self.temperature)]

    def ref_logprobs(self, ref, mb) -> list[torch.Tensor]:
        return [x.detach() for x in self.fn(ref, mb.prompt_ids, mb.responses, self.temperature)]

    def update_logprobs(self, policy, ref, mb):
        logp = self.fn(policy, mb.prompt_ids, mb.responses, self.temperature)
        return logp, mb.old, mb.ref


class TriModel:
    """Policy (with grad), old and reference log-probs of a micro-batch in one call."""

    separate_phases = False

    def __init__(self, logprob_fn, temperature: float):
        self.fn, self.temperature = logprob_fn, temperature

    def update_logprobs(self, policy, ref, mb):
        logp = self.fn(policy, mb.prompt_ids, mb.responses, self.temperature)
        old = [x.detach() for x in logp]  # old == current policy: skip its forward
        with torch.no_grad():
            ref_lp = self.fn(ref, mb.prompt_ids, mb.responses, self.temperature)
        return logp, old, ref_lp


def make_plan(engine_cfg, temperature: float):
    fn = make_logprob_fn(engine_cfg.shared_prompt)
    return (TriModel if engine_cfg.tri_model else SeparatePasses)(fn, temperature)
