"""The trainer every schedule drives: rewards, log-probs, GRPO loss, gradient accumulation, AdamW.

One iteration = begin() -> train(groups) as groups come (each: rewards, advantages, micro-batches,
log-probs, accumulate()) -> finish(), which steps; DataParallelTrainer has the same begin/train/finish.
Gradients of token *sums* are accumulated and divided by the iteration's token count once, so the
update is the full-batch token-mean update whatever the micro-batch split or arrival order.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from rlbench.engines.data.reward import gsm8k_reward
from rlbench.engines.rollout.base import Group
from rlbench.engines.trainer import grpo
from rlbench.engines.trainer.logprob_plans import make_plan
from rlbench.engines.trainer.phases import train_phases
from rlbench.stages import Stage


@dataclass
class MicroBatch:
    """k responses of one group (micro-batches never straddle groups)."""

    prompt_index: int
    prompt_ids: list[int]
    responses: list[list[int]]
    advantages: torch.Tensor  # [k]
    old: list[torch.Tensor] | None = None  # per response [R_i], filled by the old_logprob phase
    ref: list[torch.Tensor] | None = None
    behaviour_logprobs: list[list[float]] | None = None  # per response [R_i]: log pi_behav from the rollout
    behaviour_version: int = 0  # weight version that generated the group (the oldest of its tokens)
    behaviour_token_versions: list[list[int]] | None = None  # per response [R_i], when versions mix (partial rollout)


class Trainer:
    def __init__(self, policy, cfg, tokenizer):
        self.cfg, self.tok = cfg, tokenizer
        self.policy = policy
        self.ref = copy.deepcopy(policy).eval().requires_grad_(False)
        self.policy.train()  # dropout is 0 in the supported models; train() only matters for flags
        t = cfg.train
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=t.lr, betas=tuple(t.betas),
                                           weight_decay=t.weight_decay, eps=1e-8)
        self.plan = make_plan(cfg.engine, cfg.rollout.temperature)
        self.loss = grpo.make_loss(cfg)  # PPOLoss, or DecoupledPPOLoss for stale samples (bounded_async)
        self.version = 0  # weight version: number of optimizer steps taken
        self._reset()

    def _reset(self) -> None:
        self.tokens = 0
        self.loss_sum = 0.0
        self.kl_sum = 0.0
        self.extra_sums = dict.fromkeys(self.loss.token_stats, 0.0)  # the loss's own per-token sums
        self.iteration_rewards: dict[int, list[float]] = {}  # prompt index -> [G], groups trained so far
        self.policy.zero_grad(set_to_none=True)

    def begin(self) -> None:
        self._reset()

    def train(self, rec, k: int, groups: list[Group], answers: dict[int, str]) -> None:
        """All phases for these groups now, on rec (the sync batch, or one arrived group)."""
        self.iteration_rewards.update(train_phases(self, rec, k, groups, answers))

    def wait_trained(self, k: int) -> None:
        """Nothing to wait for: train() ran every phase in this process already."""

    def finish(self, rec, k: int) -> tuple[dict, dict[int, list[float]]]:
        """The iteration's optimizer step, recorded on rec; -> (step stats, rewards of every group)."""
        rewards = self.iteration_rewards
        with rec.stage(Stage.OPTIMIZER_STEP, k):
            stats = self.step()
        return stats, rewards

    def close(self) -> None:
        pass

    def rewards(self, group: Group, ground_truth: str) -> torch.Tensor:
        """[G] GSM8K rule rewards of the group's decoded responses."""
        return torch.tensor([gsm8k_reward(self.tok.decode(r), ground_truth) for r in group.responses],
                            dtype=torch.float32)

    def micro_batches(self, group: Group, advantages: torch.Tensor) -> list[MicroBatch]:
        k = self.cfg.train.micro_batch_size
        tv = group.token_versions
        return [MicroBatch(group.prompt_index, group.prompt_ids, group.responses[i:i + k], advantages[i:i + k],
                           behaviour_logprobs=group.behaviour_logprobs[i:i + k], behaviour_version=group.version,
                           behaviour_token_versions=tv[i:i + k] if tv is not None else None)
                for i in range(0, len(group.responses), k)]

    @property
    def needs_old_pass(self) -> bool:
        """Whether the old_logprob phase runs: separate passes, and a loss that uses pi_old / pi_prox."""
        return self.plan.separate_phases and self.loss.needs_old_logprobs

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return grpo.group_advantages(rewards, self.cfg.train.adv_eps)

    @torch.no_grad()
    def old_logprobs(self, mb: MicroBatch) -> None:
        mb.old = self.plan.old_logprobs(self.policy, mb)

    @torch.no_grad()
    def ref_logprobs(self, mb: MicroBatch) -> None:
        mb.ref = self.plan.ref_logprobs(self.ref, mb)

    def accumulate(self, mb: MicroBatch) -> None:
        """Forward + backward of the micro-batch's token-sum loss; gradients add up in .grad."""
        logp, old, ref = self.plan.update_logprobs(self.policy, self.ref, mb)
        logp, mask = grpo.pad_logprobs(logp)
        old = grpo.pad_logprobs(old)[0] if old is not None else None  # None: loglinear skipped its pass
        ref = grpo.pad_logprobs(ref)[0] if ref is not None else None
        loss, stats = self.loss(logp, old, ref, mb, mask, self.version)
        loss.backward()
        self.tokens += int(mask.sum().item())
        self.loss_sum += loss.item()
        self.kl_sum += stats["kl_sum"]
        for key in self.extra_sums:
            self.extra_sums[key] += stats[key]

    def step(self) -> dict:
        """Scale the summed gradient to a token mean, clip, AdamW step; version += 1."""
        n = max(self.tokens, 1)
        for p in self.policy.parameters():
            if p.grad is not None:
                p.grad.div_(n)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.train.max_grad_norm)
        self.optimizer.step()
        self.version += 1
        stats = {"loss": self.loss_sum / n, "kl": self.kl_sum / n, "grad_norm": float(grad_norm),
                 "tokens": self.tokens}
        stats.update({f"{key}_mean": v / n for key, v in self.extra_sums.items()})
        self._reset()
        return stats

    def weights(self) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self.policy.named_parameters()}

    def publish(self, iteration: int | None) -> dict[str, torch.Tensor]:
        """The weights to hand to rollout workers (DataParallelTrainer's interface; nothing to copy here)."""
        return self.weights()
