"""GRPO math: group-normalised advantages, PPO-clip token loss, KL estimators (as VERL computes them).

All losses here are token *sums*; the trainer divides the accumulated gradient by the iteration's
token count once before the optimizer step, which makes the update a token-mean over the whole batch
no matter how the batch was split into micro-batches or in which order groups arrived.
"""
from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """[G] rewards of one group -> [G] advantages (r - mean) / (std + eps).

    Like VERL's compute_grpo_outcome_advantage: unbiased std; a group of one has mean 0, std 1.
    """
    if rewards.numel() == 1:
        return rewards.clone()
    return (rewards - rewards.mean()) / (rewards.std() + eps)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL(pi || ref) estimate, VERL's kl_penalty: 'kl' (k1), 'mse' (k2), 'low_var_kl' (k3)."""
    if kind == "kl":
        return logp - ref_logp
    if kind == "mse":
        return 0.5 * (logp - ref_logp).square()
    if kind == "low_var_kl":
        kl = ref_logp - logp
        kl = kl.clamp(-20, 20)  # exp overflow guard, as VERL
        return (kl.exp() - kl - 1).clamp(-10, 10)
    raise ValueError(f"unknown kl type {kind!r}")


def ppo_clip_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip: float) -> torch.Tensor:
    """Per-token clipped surrogate -min(r*A, clip(r)*A) with r = exp(logp - old_logp). Shapes broadcast."""
    ratio = torch.exp(logp - old_logp)
    return torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip))


def token_sum_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
                   adv: torch.Tensor, mask: torch.Tensor, clip: float, kl_coef: float,
                   kl_type: str = "low_var_kl") -> tuple[torch.Tensor, dict]:
    """Sum over valid tokens of pg_loss + kl_coef * kl.

    logp/old_logp/ref_logp/mask: [B, R]; adv: [B] (one outcome advantage per sequence).
    Returns (loss_sum, stats with sums for logging).
    """
    pg = ppo_clip_loss(logp, old_logp, adv[:, None], clip)
    loss = pg
    kl_sum = torch.zeros(())
    if ref_logp is not None and kl_coef > 0:
        kl = kl_penalty(logp, ref_logp, kl_type)
        loss = loss + kl_coef * kl
        kl_sum = (kl * mask).sum().detach()
    total = (loss * mask).sum()
    return total, {"pg_sum": (pg * mask).sum().item(), "kl_sum": kl_sum.item()}


def pad_logprobs(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """List of [R_i] tensors -> ([B, R_max] zero-padded, [B, R_max] float mask)."""
    width = max(r.numel() for r in rows)
    mask = torch.zeros(len(rows), width)
    out = torch.stack([torch.nn.functional.pad(r, (0, width - r.numel())) for r in rows])
    for i, r in enumerate(rows):
        mask[i, : r.numel()] = 1.0
    return out, mask
