"""rlbench's GRPO loss and gradient equal VERL's (verl.trainer.ppo.core_algos) on the same batch.

Runs in VERL's venv (`.venv-verl/bin/python -m pytest tests/unit/engines/test_verl_loss.py`; .ci/run does); skipped where VERL
is not importable. The batch: three groups of G=4 responses of different lengths, rewards scored by each engine's
own rule (rlbench's strict GSM8K rule, VERL's gsm8k.compute_score), a policy moved off its reference (the KL term is
not zero) and off its old policy (ratios beyond both clip bounds and VERL's dual clip), split into two micro-batches.
VERL's side is its engine's actor loss as verl/workers/utils/losses.py ppo_loss builds it: the vanilla policy loss,
plus kl_loss_coef x the low_var_kl penalty, each aggregated token-mean over the iteration's tokens
(global_batch_info's batch_num_tokens) per micro-batch, the micro-batches' gradients summed. rlbench's is its
trainer's: the token sum of pg + kl_coef x kl per micro-batch, divided once by the iteration's token count.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.reward_score import gsm8k  # noqa: E402

from rlbench.core.config import TrainConfig  # noqa: E402
from rlbench.engines.data.reward import gsm8k_reward  # noqa: E402
from rlbench.engines.trainer import grpo  # noqa: E402

G, R = 4, 7
ANSWERS = ["8", "12", "5"]
RESPONSES = [["3+5=8\n#### 8", "#### 8", "#### 9", "The answer is 8."],
             ["#### 12", "#### 1,2", "#### 12.", "6*2=12 #### 12"],
             ["#### 5", "#### 5", "#### 5", "no answer"]]
LOSS_RTOL, GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-7, 1e-5


def batch():
    g = torch.Generator().manual_seed(3)
    n = G * len(ANSWERS)
    lengths = torch.randint(1, R + 1, (n,), generator=g)
    mask = (torch.arange(R)[None, :] < lengths[:, None]).float()  # [B, R]
    ref = -torch.rand(n, R, generator=g) * 3
    old = ref + torch.randn(n, R, generator=g) * 0.3
    logp = old + torch.randn(n, R, generator=g) * 1.2  # ratios beyond 1 +- 0.2 and past the dual clip's 3
    return logp, old, ref, mask


def rewards(score) -> torch.Tensor:
    return torch.tensor([float(score(r, a)) for group, a in zip(RESPONSES, ANSWERS) for r in group])


def test_rewards_and_advantages_equal():
    ours = rewards(gsm8k_reward)
    theirs = rewards(lambda r, a: gsm8k.compute_score(r, a))
    assert torch.equal(ours, theirs) and 0 < ours.sum() < len(ours)  # mixed rewards: the advantages move
    adv_ours = torch.cat([grpo.group_advantages(ours[i:i + G], 1e-6) for i in range(0, len(ours), G)])
    scores = torch.zeros(len(ours), R)
    scores[:, -1] = ours
    uid = __import__("numpy").array([str(i // G) for i in range(len(ours))], dtype=object)
    adv_theirs, _ = core_algos.compute_grpo_outcome_advantage(scores, torch.ones(len(ours), R), uid)
    torch.testing.assert_close(adv_ours, adv_theirs[:, 0], atol=1e-6, rtol=1e-6)


def verl_loss(logp, old, ref, adv, mask, t, parts):
    """VERL's actor loss per micro-batch (losses.py ppo_loss), their gradients summed as its engine does."""
    cfg = OmegaConf.create({"clip_ratio": t.clip_ratio, "clip_ratio_low": t.clip_ratio, "clip_ratio_high":
                            t.clip_ratio, "clip_ratio_c": t.clip_ratio_c, "global_batch_info": {}})
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": len(mask)}
    cfg.global_batch_info = info
    total = 0.0
    for idx in parts:
        pg, _ = core_algos.compute_policy_loss_vanilla(old[idx], logp[idx], adv[idx, None].expand(-1, R), mask[idx],
                                                       "token-mean", cfg)
        kl = core_algos.kl_penalty(logp[idx], ref[idx], t.kl_type)
        loss = pg + core_algos.agg_loss(kl, mask[idx], "token-mean", **info) * t.kl_coef
        loss.backward()
        total += loss.detach()
    return total


def our_loss(logp, old, ref, adv, mask, t, parts):
    """rlbench's trainer: the token sum per micro-batch, one division by the iteration's tokens."""
    total = 0.0
    for idx in parts:
        loss, _ = grpo.token_sum_loss(logp[idx], old[idx], ref[idx], adv[idx], mask[idx], t.clip_ratio, t.kl_coef,
                                      t.kl_type, t.clip_ratio_c)
        (loss / mask.sum()).backward()
        total += loss.detach() / mask.sum()
    return total


@pytest.mark.parametrize("kl_type", ["low_var_kl", "kl"])
def test_loss_and_gradient_equal(kl_type):
    t = TrainConfig(kl_coef=0.05, kl_type=kl_type)
    logp, old, ref, mask = batch()
    adv = torch.cat([grpo.group_advantages(r, t.adv_eps) for r in rewards(gsm8k_reward).split(G)])
    parts = [torch.arange(0, 5), torch.arange(5, len(mask))]  # two micro-batches
    ours_in, theirs_in = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    ours = our_loss(ours_in, old, ref, adv, mask, t, parts)
    theirs = verl_loss(theirs_in, old, ref, adv, mask, t, parts)
    assert float(ours) == pytest.approx(float(theirs), rel=LOSS_RTOL)
    torch.testing.assert_close(ours_in.grad, theirs_in.grad, atol=GRAD_ATOL, rtol=GRAD_RTOL)
    ratio = (logp - old).exp()[mask.bool()]
    assert (ratio > 1.2).any() and (ratio < 0.8).any() and (ratio > 3).any()  # every clip bound reached


def test_a_loss_without_the_dual_clip_or_the_kl_term_would_differ():
    """The comparison is sharp: rlbench's loss with one setting off moves away from VERL's."""
    logp, old, ref, mask = batch()
    t = TrainConfig(kl_coef=0.05)
    adv = torch.cat([grpo.group_advantages(r, t.adv_eps) for r in rewards(gsm8k_reward).split(G)])
    parts = [torch.arange(len(mask))]
    theirs = verl_loss(logp.clone().requires_grad_(), old, ref, adv, mask, t, parts)
    for other in (TrainConfig(kl_coef=0.05, clip_ratio_c=None), TrainConfig(kl_coef=0.0)):
        assert float(our_loss(logp.clone().requires_grad_(), old, ref, adv, mask, other, parts)) != \
            pytest.approx(float(theirs), rel=1e-4)
