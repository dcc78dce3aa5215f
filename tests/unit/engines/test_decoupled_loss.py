"""Decoupled PPO loss and A-3PO's log-linear proximal policy against hand-computed values; with
staleness 0 and behaviour log-probs equal to the trainer's, the update is bitwise the PPO update."""
import math

import pytest
import torch
from conftest import fixed_groups, fixed_reward_trainer

from rlbench.core.config_files import load_config
from rlbench.engines.model.tiny import build_tiny
from rlbench.engines.model.tokenizer import CharTokenizer
from rlbench.engines.trainer import grpo

L = math.log


def test_decoupled_pg_loss_hand_computed():
    # token: pi_theta, pi_prox, pi_behav, A
    #  0: r = 0.55/0.5 = 1.1, w = 0.5/0.25 = 2, A = +1: -min(1.1, 1.1) * 2 = -2.2
    #  1: w = 0.9/0.1 = 9 > cap 5: masked out -> 0
    #  2: r = 0.1/0.2 = 0.5, w = 0.2/0.4 = 0.5, A = -1: max(0.5, 0.8) * 0.5 = 0.4 (clipped at 1 - 0.2)
    #  3: r = 0.6/0.4 = 1.5, w = 1, A = +1: -min(1.5, 1.2) = -1.2 (clipped at 1 + 0.2)
    logp = torch.tensor([L(0.55), L(0.5), L(0.1), L(0.6)], requires_grad=True)
    prox = torch.tensor([L(0.5), L(0.9), L(0.2), L(0.4)])
    behav = torch.tensor([L(0.25), L(0.1), L(0.4), L(0.4)])
    adv = torch.tensor([1.0, 1.0, -1.0, 1.0])
    loss, w, kept = grpo.decoupled_pg_loss(logp, prox, behav, adv, clip=0.2, cap=5.0)
    assert torch.allclose(loss, torch.tensor([-2.2, 0.0, 0.4, -1.2]), atol=1e-6)
    assert torch.allclose(w, torch.tensor([2.0, 0.0, 0.5, 1.0]), atol=1e-6)
    assert kept.tolist() == [True, False, True, True]
    loss.sum().backward()
    # d/dlogp of -A r w = -A r w where unclipped; 0 where clipped or masked out.
    assert torch.allclose(logp.grad, torch.tensor([-2.2, 0.0, 0.0, 0.0]), atol=1e-6)
    # No cap: token 1 is weighted 9 instead of dropped (r = 0.5/0.9, A = +1: -min(r, 0.8) * 9 = -5).
    loss, w, _ = grpo.decoupled_pg_loss(logp.detach(), prox, behav, adv, clip=0.2, cap=None)
    assert loss[1].item() == pytest.approx(-5.0, abs=1e-5) and w[1].item() == pytest.approx(9.0)


def test_decoupled_equals_ppo_when_prox_is_behaviour():
    """Staleness 0 (pi_prox = pi_behav): weight exactly 1, the loss is PPO's bit for bit."""
    g = torch.Generator().manual_seed(0)
    logp, old = torch.randn(3, 7, generator=g) * 0.1 - 2, torch.randn(3, 7, generator=g) * 0.1 - 2
    adv = torch.randn(3, 1, generator=g)
    dec, w, _ = grpo.decoupled_pg_loss(logp, old, old.clone(), adv, clip=0.2, cap=5.0)
    assert torch.equal(w, torch.ones_like(w))
    assert torch.equal(dec, grpo.ppo_clip_loss(logp, old, adv, 0.2))


@pytest.mark.parametrize("d, expected", [
    (0, 0.2),  # on-policy: pi_prox = pi_behav
    (1, 0.2),  # one step stale: v_prox = v_behav, pi_prox = pi_behav
    (2, 0.4),  # alpha 1/2: sqrt(0.2 * 0.8)
    (4, 0.2 ** 0.25 * 0.8 ** 0.75),  # alpha 3/4: 0.565685
])
def test_loglinear_prox_hand_computed(d, expected):
    behav = torch.tensor([[L(0.2)]])
    logp = torch.tensor([[L(0.8)]], requires_grad=True)
    prox = grpo.loglinear_prox_logp(behav, logp, behav_version=10 - d, theta_version=10)
    assert prox.exp().item() == pytest.approx(expected, rel=1e-6)
    assert not prox.requires_grad  # pi_theta enters detached: no gradient through pi_prox


def test_loglinear_prox_per_row_versions():
    behav = torch.full((3, 2), L(0.2))
    logp = torch.full((3, 2), L(0.8))
    prox = grpo.loglinear_prox_logp(behav, logp, torch.tensor([5, 4, 3]), theta_version=5)  # d = 0, 1, 2
    assert torch.allclose(prox.exp(), torch.tensor([[0.2, 0.2], [0.2, 0.2], [0.4, 0.4]]), atol=1e-6)


# ---------------------------------------------------------------- through the trainer

_FixedReward = fixed_reward_trainer()
_groups = fixed_groups


def _trainer(overrides):
    cfg = load_config(None, ["rollout.group_size=4", "train.micro_batch_size=2", "train.lr=1e-2"] + overrides)
    tok = CharTokenizer()
    tr = _FixedReward(build_tiny(cfg.model, tok.vocab_size, seed=0), cfg, tok)
    tr.optimizer = torch.optim.SGD(tr.policy.parameters(), lr=1.0)  # the update is the clipped gradient
    return tr


def _update(tr, groups):
    tr.begin()
    for g in groups:
        for mb in tr.micro_batches(g, tr.advantages(tr.rewards(g, "0"))):
            if tr.needs_old_pass:
                tr.old_logprobs(mb)
            if tr.plan.separate_phases:
                tr.ref_logprobs(mb)
            tr.accumulate(mb)
    stats = tr.step()
    return {n: p.detach().clone() for n, p in tr.policy.named_parameters()}, stats


def _on_policy_groups(tr):
    """The groups with behaviour log-probs equal to the trainer's own (a rollout without numeric drift)."""
    groups = _groups()
    for g in groups:
        g.behaviour_logprobs = [lp.tolist() for lp in tr.plan.fn(tr.policy, g.prompt_ids, g.responses,
                                                                  tr.plan.temperature)]
        g.version = tr.version
    return groups


@pytest.mark.parametrize("prox", ["recompute", "loglinear"])
def test_staleness_zero_update_is_ppo_update_bitwise(prox):
    ppo = _trainer([])
    assert isinstance(ppo.loss, grpo.PPOLoss)
    dec = _trainer(["engine.schedule=bounded_async", "engine.max_staleness=0", f"train.prox_logp={prox}"])
    assert isinstance(dec.loss, grpo.DecoupledPPOLoss)
    assert dec.needs_old_pass == (prox == "recompute")  # loglinear: no proximal forward pass
    init = {n: p.detach().clone() for n, p in dec.policy.named_parameters()}
    with torch.no_grad():
        groups = _on_policy_groups(dec)
    want, _ = _update(ppo, _groups())
    got, stats = _update(dec, groups)
    assert any(not torch.equal(init[n], want[n]) for n in want)  # the update moved the weights
    for n in want:
        assert torch.equal(got[n], want[n]), n
    assert stats["behav_imp_weight_mean"] == 1.0 and stats["behav_capped_mean"] == 0.0


def test_cap_masks_tokens_but_keeps_them_in_the_token_mean():
    tr = _trainer(["engine.schedule=bounded_async", "train.prox_logp=recompute", "train.behav_imp_weight_cap=2"])
    with torch.no_grad():
        groups = _on_policy_groups(tr)
    # Response 0 (3 tokens) was "sampled" by a policy e times less likely: w = pi_prox / pi_behav = e > 2.
    groups[0].behaviour_logprobs[0] = [x - 1.0 for x in groups[0].behaviour_logprobs[0]]
    _, stats = _update(tr, groups)
    n = 2 * (3 + 9 + 5 + 12)
    assert stats["tokens"] == n  # capped tokens still count in the token mean, as in AReaL
    assert stats["behav_capped_mean"] == pytest.approx(3 / n)
    assert stats["behav_imp_weight_mean"] == pytest.approx((n - 3) / n)  # w = 1 elsewhere, 0 when capped


# ---------------------------------------------------------------- partial rollout: versions per token

def test_loglinear_prox_per_token_versions():
    """One response holding tokens of three versions (partial rollout): alpha per token."""
    behav = torch.full((2, 3), L(0.2))
    logp = torch.full((2, 3), L(0.8))
    versions = torch.tensor([[5, 4, 3], [3, 3, 5]])  # d = [0, 1, 2], [2, 2, 0] at theta version 5
    prox = grpo.loglinear_prox_logp(behav, logp, versions, theta_version=5)
    assert torch.allclose(prox.exp(), torch.tensor([[0.2, 0.2, 0.4], [0.4, 0.4, 0.2]]), atol=1e-6)


def test_decoupled_loss_on_a_mixed_version_response_hand_computed():
    """pi_theta 0.5 and pi_behav 0.25 on every token, versions [3, 4, 5] at theta version 5, A = +1:
    d = [2, 1, 0] -> alpha [1/2, 0, 0] -> pi_prox [sqrt(0.25 * 0.5), 0.25, 0.25]; w = pi_prox / pi_behav
    = [sqrt 2, 1, 1]; r = pi_theta / pi_prox = [sqrt 2, 2, 2], clipped at 1.2: loss -1.2 w per token."""
    from types import SimpleNamespace

    t = SimpleNamespace(clip_ratio=0.2, behav_imp_weight_cap=5.0, kl_coef=0.0, kl_type="low_var_kl",
                        prox_logp="loglinear")
    loss_fn = grpo.DecoupledPPOLoss(t)
    logp = torch.full((1, 3), L(0.5), dtype=torch.float64)
    mb = SimpleNamespace(behaviour_logprobs=[[L(0.25)] * 3], advantages=torch.tensor([1.0]), behaviour_version=3,
                         behaviour_token_versions=[[3, 4, 5]])
    total, stats = loss_fn(logp, None, None, mb, torch.ones(1, 3, dtype=torch.float64), version=5)
    assert total.item() == pytest.approx(-1.2 * (math.sqrt(2) + 1 + 1), abs=1e-9)
    assert stats["behav_imp_weight"] == pytest.approx(math.sqrt(2) + 2, abs=1e-9)
    mb.behaviour_token_versions = None  # the group's oldest version for every token: alpha 1/2 everywhere
    whole, _ = loss_fn(logp, None, None, mb, torch.ones(1, 3, dtype=torch.float64), version=5)
    assert whole.item() == pytest.approx(-1.2 * 3 * math.sqrt(2), abs=1e-9)


def test_micro_batches_carry_the_token_versions_of_their_responses():
    tr = _trainer(["engine.schedule=bounded_async", "engine.max_staleness=1", "train.prox_logp=loglinear"])
    g = _groups()[0]
    g.token_versions = [[0] * (len(r) - 1) + [1] for r in g.responses]
    mbs = tr.micro_batches(g, tr.advantages(tr.rewards(g, "0")))
    assert [v for mb in mbs for v in mb.behaviour_token_versions] == g.token_versions
    assert all(len(v) == len(r) for mb in mbs for v, r in zip(mb.behaviour_token_versions, mb.responses))
