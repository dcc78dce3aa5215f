"""GRPO math against hand-computed values."""
import math

import torch

from rlbench.engines.trainer import grpo


def test_group_advantages_hand_computed():
    adv = grpo.group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), eps=0.0)
    # mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    assert torch.allclose(adv, torch.tensor([0.866025, -0.866025, -0.866025, 0.866025]), atol=1e-6)
    assert torch.equal(grpo.group_advantages(torch.tensor([1.0, 1.0, 1.0])), torch.zeros(3))
    assert torch.equal(grpo.group_advantages(torch.tensor([0.7])), torch.tensor([0.7]))  # VERL: G=1


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
    from rlbench.metrics import idle_fractions

    events = [{"worker": "w", "stage": "rollout", "start": 0.0, "end": 1.0},  # before the window
              {"worker": "w", "stage": "update", "start": 2.0, "end": 2.5}]
    assert idle_fractions(events, 1.5, 2.5) == {"w": 0.5}
