"""Tri-model: policy, old and reference log-probs in one call equal three separate passes."""
import copy

import pytest
import torch

from rlbench.core.config_files import load_config
from rlbench.engines.model.tiny import build_tiny
from rlbench.engines.model.tokenizer import CharTokenizer
from rlbench.engines.trainer.logprob_plans import SeparatePasses, TriModel, make_logprob_fn
from rlbench.engines.trainer.trainer import MicroBatch


@pytest.mark.parametrize("shared_prompt", [False, True])
def test_tri_model_equals_three_passes(shared_prompt):
    cfg = load_config(None, [])
    tok = CharTokenizer()
    policy = build_tiny(cfg.model, tok.vocab_size, seed=0)
    ref = build_tiny(cfg.model, tok.vocab_size, seed=1)  # a reference that differs from the policy
    g = torch.Generator().manual_seed(3)
    mb = MicroBatch(0, torch.randint(3, 90, (11,), generator=g).tolist(),
                    [torch.randint(3, 90, (n,), generator=g).tolist() for n in (4, 9, 1)], torch.zeros(3))
    fn = make_logprob_fn(shared_prompt)
    three = SeparatePasses(fn, temperature=0.8)
    with torch.no_grad():
        mb.old = three.old_logprobs(policy, mb)
        mb.ref = three.ref_logprobs(ref, mb)
    logp3, old3, ref3 = three.update_logprobs(policy, ref, mb)
    calls = {"policy": 0, "ref": 0}
    hooks = [m.register_forward_hook(lambda *_, k=k: calls.__setitem__(k, calls[k] + 1))
             for k, m in (("policy", policy.get_input_embeddings()), ("ref", ref.get_input_embeddings()))]
    logp1, old1, ref1 = TriModel(fn, temperature=0.8).update_logprobs(policy, ref, copy.copy(mb))
    for h in hooks:
        h.remove()
    assert calls == {"policy": 1, "ref": 1}  # one policy forward serves pi_theta and pi_old
    for a, b in zip(logp1, logp3):
        assert a.requires_grad and torch.equal(a, b)
    for a, b in zip(old1, old3):
        assert not a.requires_grad and torch.equal(a, b)  # old == current: detached policy log-probs
    for a, b in zip(ref1, ref3):
        assert not a.requires_grad and torch.equal(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(ref1, logp1))  # the ref really is another model
