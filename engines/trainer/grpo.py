"""GRPO math: group-normalised advantages, PPO-clip token loss, KL estimators (as VERL computes
them), and for stale samples the decoupled PPO loss with A-3PO's log-linear proximal policy (as
AReaL does).

All losses here are token *sums*; the trainer divides the accumulated gradient by the iteration's
token count once before the optimizer step, which makes the update a token-mean over the whole batch
no matter how the batch was split into micro-batches or in which order groups arrived.
"""
from __future__ import annotations

import torch

from rlbench.core import schedules
from rlbench.core.schedules.spec import DECOUPLED


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """[G] rewards of one group -> [G] advantages (r - mean) / (std + eps).

    Like VERL's compute_grpo_outcome_advantage: unbiased std; a group of one has mean 0, std 1, so
    its advantage is r / (1 + eps).
    """
    if rewards.numel() == 1:
        return rewards / (1.0 + eps)
    return (rewards - rewards.mean()) / (rewards.std() + eps)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor,
               kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL(pi || ref) estimate, VERL's kl_penalty: 'kl' (k1), 'mse' (k2), 'low_var_kl'
    (k3)."""
    if kind == "kl":
        return logp - ref_logp
    if kind == "mse":
        return 0.5 * (logp - ref_logp).square()
    if kind == "low_var_kl":
        kl = ref_logp - logp
        kl = kl.clamp(-20, 20)  # exp overflow guard, as VERL
        return (kl.exp() - kl - 1).clamp(-10, 10)
    raise ValueError(f"unknown kl type {kind!r}")


def ppo_clip_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip: float,
                  clip_c: float | None = None) -> torch.Tensor:
    """Per-token dual-clip PPO loss, as VERL's compute_policy_loss_vanilla. Shapes broadcast.

    r = exp(clamp(logp - old_logp, -20, 20)); l = max(-A r, -A clip(r, 1 - clip, 1 + clip)); for A <
    0 the loss is further bounded by -A clip_c (dual clip: a huge ratio on a bad token cannot
    dominate the step). clip_c None: plain PPO-clip (the decoupled loss uses it so, as AReaL's
    default c_clip=None).
    """
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip))
    if clip_c is None:
        return loss
    return torch.where(adv < 0, torch.minimum(loss, -adv * clip_c), loss)


def token_sum_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
                   adv: torch.Tensor, mask: torch.Tensor, clip: float, kl_coef: float,
                   kl_type: str = "low_var_kl",
                   clip_c: float | None = None) -> tuple[torch.Tensor, dict]:
    """Sum over valid tokens of pg_loss + kl_coef * kl.

    logp/old_logp/ref_logp/mask: [B, R]; adv: [B] (one outcome advantage per sequence).
    Returns (loss_sum, stats with sums for logging).
    """
    pg = ppo_clip_loss(logp, old_logp, adv[:, None], clip, clip_c)
    return _sum_with_kl(pg, logp, ref_logp, mask, kl_coef, kl_type)


def _sum_with_kl(pg: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor | None,
                 mask: torch.Tensor,
                 kl_coef: float, kl_type: str) -> tuple[torch.Tensor, dict]:
    """Per-token policy loss pg [B, R] + kl_coef * KL(pi || ref), summed over valid tokens."""
    loss = pg
    kl_sum = torch.zeros((), device=logp.device)
    if ref_logp is not None and kl_coef > 0:
        kl = kl_penalty(logp, ref_logp, kl_type)
        loss = loss + kl_coef * kl
        kl_sum = (kl * mask).sum().detach()
    total = (loss * mask).sum()
    return total, {"pg_sum": (pg * mask).sum().item(), "kl_sum": kl_sum.item()}


# ---------------------------------------------------------------- decoupled PPO (bounded staleness)

def loglinear_prox_logp(behav_logp: torch.Tensor, logp: torch.Tensor, behav_version,
                        theta_version: int):
    """A-3PO's proximal log-probs without a forward pass (AReaL's prox_logp_method=loglinear).

    log pi_prox = log pi_behav + alpha * (log pi_theta - log pi_behav), alpha = (v_prox - v_behav) /
    (v_theta - v_behav) with v_prox = v_theta - 1, clamped to [0, 1]: alpha = 1 - 1/d for staleness
    d = v_theta - v_behav >= 1 (d = 1: pi_prox = pi_behav), and 0 for d = 0.
    behav_logp/logp: [B, R]; behav_version: int, [B] (per response) or [B, R] (per token: partial
    rollout, where one response holds tokens of several versions); theta_version: int. -> [B, R], no
    gradient.
    """
    v_behav = torch.as_tensor(behav_version, dtype=logp.dtype, device=logp.device)
    v_behav = v_behav if v_behav.dim() == 2 else v_behav.reshape(-1, 1)  # [B, R] or [B|1, 1]
    d = float(theta_version) - v_behav
    alpha = torch.where(d > 0, (d - 1) / d.clamp_min(1), torch.zeros_like(d)).clamp(0.0, 1.0)
    return behav_logp + alpha * (logp.detach() - behav_logp)


def decoupled_pg_loss(logp: torch.Tensor, prox_logp: torch.Tensor, behav_logp: torch.Tensor,
                      adv: torch.Tensor,
                      clip: float,
                      cap: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token decoupled PPO loss (AReaL's ppo_actor_loss_fn with a proximal policy).

    w * -min(r A, clip(r) A) with r = pi_theta / pi_prox and the behaviour importance weight
    w = pi_prox / pi_behav (no gradient). Tokens with w > cap get w = 0: masked out of the loss but
    still counted in the token mean, as AReaL does. Shapes broadcast ([B, R] log-probs, [B, 1]
    advantages). -> (loss [B, R], w [B, R] after the cap, kept [B, R] bool).
    """
    w = torch.exp(prox_logp.detach() - behav_logp.detach())
    kept = w <= cap if cap is not None else torch.ones_like(w, dtype=torch.bool)
    w = torch.where(kept, w, torch.zeros_like(w))
    return ppo_clip_loss(logp, prox_logp.detach(), adv, clip) * w, w, kept


# ---------------------------------------------------------------- loss components (picked by the
# config)

class PPOLoss:
    """PPO-clip on pi_theta / pi_old, pi_old from the old-logprob phase: the on-policy schedules."""

    needs_old_logprobs = True
    # extra per-token sums in the stats, reported as means per step
    token_stats: tuple[str, ...] = ()

    def __init__(self, train_cfg):
        self.t = train_cfg

    def __call__(self, logp, old, ref, mb, mask, version: int) -> tuple[torch.Tensor, dict]:
        t = self.t
        adv = mb.advantages.to(logp.device)  # rewards and advantages are computed on the CPU
        return token_sum_loss(logp, old, ref, adv, mask, t.clip_ratio, t.kl_coef, t.kl_type,
                              t.clip_ratio_c)


class DecoupledPPOLoss:
    """Decoupled PPO (AReaL): pi_prox / pi_behav (capped) times the clipped objective on pi_theta /
    pi_prox.

    pi_behav: the rollout's per-token log-probs (mb.behaviour_logprobs, at the sampling
    temperature). pi_prox: recompute -> the old-logprob phase's pass at the weights the step starts
    from; loglinear -> A-3PO's interpolation by staleness, so no old-logprob pass is needed.
    """

    # w after the cap; tokens masked out by the cap
    token_stats = ("behav_imp_weight", "behav_capped")

    def __init__(self, train_cfg):
        self.t = train_cfg
        self.needs_old_logprobs = train_cfg.prox_logp == "recompute"

    def __call__(self, logp, old, ref, mb, mask, version: int) -> tuple[torch.Tensor, dict]:
        t = self.t
        behav = pad_logprobs([torch.tensor(b, dtype=logp.dtype, device=logp.device)
                              for b in mb.behaviour_logprobs])[0]  # [B, R]
        if self.needs_old_logprobs:
            prox = old
        else:
            prox = loglinear_prox_logp(behav, logp, behaviour_versions(mb, logp), version)
        # rewards and advantages are computed on the CPU
        adv = mb.advantages.to(logp.device)[:, None]
        pg, w, kept = decoupled_pg_loss(logp, prox, behav, adv, t.clip_ratio,
                                        t.behav_imp_weight_cap)
        total, stats = _sum_with_kl(pg, logp, ref, mask, t.kl_coef, t.kl_type)
        stats["behav_imp_weight"] = (w * mask).sum().item()
        stats["behav_capped"] = ((~kept).float() * mask).sum().item()
        return total, stats


def behaviour_versions(mb, like: torch.Tensor):
    """The micro-batch's behaviour versions: per token [B, R] when its responses mix versions
    (partial rollout; padding positions get version 0, masked out of the loss), else the group's one
    version."""
    if mb.behaviour_token_versions is None:
        return mb.behaviour_version
    rows = [torch.tensor(v, dtype=like.dtype,
                         device=like.device) for v in mb.behaviour_token_versions]
    return pad_logprobs(rows)[0]


def make_loss(cfg):
    """The loss the schedule's record asks for: the decoupled loss for stale samples, plain PPO
    otherwise."""
    return (DecoupledPPOLoss if schedules.of(cfg).loss == DECOUPLED else PPOLoss)(cfg.train)


def pad_logprobs(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """List of [R_i] tensors -> ([B, R_max] zero-padded, [B, R_max] float mask on the rows'
    device)."""
    width = max(r.numel() for r in rows)
    mask = torch.zeros(len(rows), width, device=rows[0].device)
    out = torch.stack([torch.nn.functional.pad(r, (0, width - r.numel())) for r in rows])
    for i, r in enumerate(rows):
        mask[i, : r.numel()] = 1.0
    return out, mask
