"""GRPO math against hand-computed values."""
import math

import pytest
import torch

from rlbench.engines.trainer import grpo


def test_group_advantages_hand_computed():
    adv = grpo.group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), eps=0.0)
    # mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    assert torch.allclose(adv, torch.tensor([0.866025, -0.866025, -0.866025, 0.866025]), atol=1e-6)
    assert torch.equal(grpo.group_advantages(torch.tensor([1.0, 1.0, 1.0])), torch.zeros(3))
    assert torch.equal(grpo.group_advantages(torch.tensor([0.7]), eps=0.0), torch.tensor([0.7]))  # VERL: G=1


def test_low_var_kl_hand_computed():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    # k3: exp(ref - logp) - (ref - logp) - 1 = 0.5 + ln 2 - 1
    assert torch.allclose(grpo.kl_penalty(logp, ref), torch.tensor([0.5 + math.log(2) - 1]), atol=1e-7)
    assert torch.equal(grpo.kl_penalty(logp, logp), torch.zeros(1))
    assert torch.allclose(grpo.kl_penalty(logp, ref, "kl"), torch.tensor([math.log(2)]))
    assert torch.allclose(grpo.kl_penalty(logp, ref, "mse"), torch.tensor([0.5 * math.log(2) ** 2]))


def test_ppo_clip_hand_computed():
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss = grpo.ppo_clip_loss(logp, old, adv, clip=0.2)
    # A>0, r=1.5: -min(1.5, 1.2) = -1.2 | A<0, r=1.5: 1.5 | A>0, r=0.5: -0.5 | A<0, r=0.5: 0.8
    assert torch.allclose(loss, torch.tensor([-1.2, 1.5, -0.5, 0.8]), atol=1e-6)


def test_dual_clip_hand_computed():
    """VERL's default dual clip (clip_ratio_c=3): for A < 0 the loss is at most -A * 3."""
    old = torch.zeros(5)
    logp = torch.log(torch.tensor([5.0, 2.5, 5.0, 0.1, 1e12]))
    adv = torch.tensor([-1.0, -1.0, 2.0, -2.0, -0.5])
    loss = grpo.ppo_clip_loss(logp, old, adv, clip=0.2, clip_c=3.0)
    # A=-1, r=5: min(max(5, 1.2), 3) = 3 | A=-1, r=2.5: 2.5 (under the bound) | A=2, r=5: -min(10, 2.4) = -2.4
    # A=-2, r=0.1: max(0.2, 1.6) = 1.6 | A=-0.5, r=exp(20) after the log-ratio clamp: bounded at 1.5
    assert torch.allclose(loss, torch.tensor([3.0, 2.5, -2.4, 1.6, 1.5]), atol=1e-5)
    plain = grpo.ppo_clip_loss(logp, old, adv, clip=0.2)
    assert plain[0].item() == pytest.approx(5.0) and plain[4].item() == pytest.approx(0.5 * math.exp(20.0))  # unbounded


def test_default_loss_dual_clips():
    """The PPO loss sync and periodic-async train with takes train.clip_ratio_c (default 3.0, as VERL)."""
    from types import SimpleNamespace

    from rlbench.core.config import TrainConfig

    t = TrainConfig()
    assert t.clip_ratio_c == 3.0
    mb = SimpleNamespace(advantages=torch.tensor([-1.0]))
    logp, mask = torch.log(torch.tensor([[5.0]])), torch.ones(1, 1)
    loss, _ = grpo.PPOLoss(t)(logp, torch.zeros(1, 1), None, mb, mask, 0)
    assert loss.item() == 3.0
    loss, _ = grpo.PPOLoss(t.model_copy(update={"clip_ratio_c": None}))(logp, torch.zeros(1, 1), None, mb, mask, 0)
    assert abs(loss.item() - 5.0) < 1e-5


def test_token_sum_loss_masks_padding():
    logp = torch.tensor([[0.0, 0.0, 5.0], [0.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, 2.0])
    loss, _ = grpo.token_sum_loss(logp, logp.clone(), None, adv, mask, 0.2, 0.0)
    assert loss.item() == -(1.0 + 1.0 + 2.0)  # ratio 1 on the three valid tokens


def test_pad_logprobs():
    out, mask = grpo.pad_logprobs([torch.tensor([1.0, 2.0]), torch.tensor([3.0])])
    assert out.tolist() == [[1.0, 2.0], [3.0, 0.0]] and mask.tolist() == [[1, 1], [1, 0]]


def test_idle_fraction_ignores_events_outside_the_window():
    from rlbench.core.results.metrics import idle_fractions

    events = [{"worker": "w", "stage": "rollout", "start": 0.0, "end": 1.0},  # before the window
              {"worker": "w", "stage": "update", "start": 2.0, "end": 2.5}]
    assert idle_fractions(events, 1.5, 2.5) == {"w": 0.5}
