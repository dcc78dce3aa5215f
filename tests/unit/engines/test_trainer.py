"""Gradient accumulation: 1, 2 and 4 micro-batches give the same update as one full batch."""
import copy

import pytest
import torch
from conftest import fixed_groups, fixed_reward_trainer

from rlbench.core.config_files import load_config
from rlbench.engines.model.tiny import build_tiny
from rlbench.engines.model.tokenizer import CharTokenizer


_FixedReward = fixed_reward_trainer()
_groups = fixed_groups


def _update(mbs: int, tri_model=False, shared_prompt=False):
    cfg = load_config(None, [f"train.micro_batch_size={mbs}", "rollout.group_size=4", "train.lr=1e-2",
                             f"engine.tri_model={tri_model}", f"engine.shared_prompt={shared_prompt}"])
    tok = CharTokenizer()
    model = build_tiny(cfg.model, tok.vocab_size, seed=0)
    tr = _FixedReward(model, cfg, tok)
    # Plain SGD with lr 1 makes the update the (clipped) gradient itself; Adam's first step is
    # ~sign(g) and would amplify float-summation noise on gradients that are ~0.
    tr.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    tr.begin()
    for g in _groups():
        for mb in tr.micro_batches(g, tr.advantages(tr.rewards(g, "0"))):
            if tr.plan.separate_phases:
                tr.old_logprobs(mb)
                tr.ref_logprobs(mb)
            tr.accumulate(mb)
    stats = tr.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}, stats


@pytest.mark.parametrize("tri_model, shared_prompt", [(False, False), (True, False), (False, True)])
def test_micro_batch_split_invariance(tri_model, shared_prompt):
    ref, stats = _update(4, tri_model, shared_prompt)
    assert stats["tokens"] == 2 * (3 + 9 + 5 + 12)
    for mbs in (1, 2):
        got, _ = _update(mbs, tri_model, shared_prompt)
        for n in ref:
            torch.testing.assert_close(got[n], ref[n], rtol=1e-5, atol=1e-7)


def test_update_moves_weights_and_version():
    cfg = load_config(None, [])
    tok = CharTokenizer()
    model = build_tiny(cfg.model, tok.vocab_size, seed=0)
    before = copy.deepcopy(model.state_dict())
    tr = _FixedReward(model, cfg, tok)
    tr.begin()
    for g in _groups():
        for mb in tr.micro_batches(g, tr.advantages(tr.rewards(g, "0"))):
            tr.old_logprobs(mb)
            tr.ref_logprobs(mb)
            tr.accumulate(mb)
    tr.step()
    assert tr.version == 1
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
