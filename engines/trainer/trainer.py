"""The trainer every schedule drives: rewards, log-probs, GRPO loss, gradient accumulation, AdamW.

One iteration = begin() -> train(groups) as groups come (each: rewards, advantages, micro-batches,
log-probs, accumulate(), which calls the loss) -> finish(), which steps. `train` is the one trainer
entry of every schedule: sync calls it once with its whole shard, the async schedules once per
arrived group (periodic-async with train.micro_batch_tokens: the groups that have arrived), and on
data-parallel ranks (ranks.py) it is this same method in the rank's process (DataParallelTrainer,
distributed.py, has the same begin/train/finish on the driver).
Gradients of token *sums* are accumulated and divided by the iteration's token count once, so the
update is the full-batch token-mean update whatever the micro-batch split or arrival order; with
several ranks, finish() all-reduces the sums and gradients first.
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist

from rlbench.core.devices import device as dev
from rlbench.core.record import lifecycle, progress
from rlbench.core.record.lifecycle import Phase
from rlbench.core.record.stages import Stage
from rlbench.engines.data.reward import gsm8k_reward
from rlbench.engines.model.compiled import CompileLog, compile_model
from rlbench.engines.rollout.base import Group
from rlbench.engines.trainer import grpo
from rlbench.engines.trainer.logprob_plans import AutoLayout, make_plan
from rlbench.engines.trainer.micro_batch import MicroBatch, pack_by_tokens


class Trainer:
    def __init__(self, policy, cfg, tokenizer, world: int = 1, ref=None):
        """world: data-parallel ranks training replicas of this policy (their process group joined
        before the first finish); 1: nothing is reduced. ref: the reference model, a model holding
        the policy's initial weights (a worker maps it from the run's weight file); None: a copy of
        `policy`."""
        self.cfg, self.tok, self.world = cfg, tokenizer, world
        self.policy = policy
        self.ref = (copy.deepcopy(policy) if ref is None else ref).eval().requires_grad_(False)
        self.policy.train()  # dropout is 0 in the supported models; train() only matters for flags
        t = cfg.train
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=t.lr, betas=tuple(t.betas),
                                           weight_decay=t.weight_decay, eps=1e-8)
        self.plan = make_plan(cfg.engine, cfg.rollout.temperature, policy)
        self.auto_layout = self.plan.fn if isinstance(self.plan.fn, AutoLayout) else None
        # PPOLoss, or DecoupledPPOLoss for stale samples (bounded_async)
        self.loss = grpo.make_loss(cfg)
        self.version = 0  # weight version: number of optimizer steps taken
        self._reset()
        self.compiled = "train" in dev.compile_targets(cfg.engine.compile, policy.device.type)
        if self.compiled:
            compile_model(self.policy)
            compile_model(self.ref)
            with lifecycle.phase(Phase.COMPILE):
                self.warm_compile()

    def warm_compile(self) -> None:
        """engine.compile train: one small group through every pass this config runs (old,
        reference, update with its backward), so that their compilations happen at start-up (the
        phase `compile`), not in the first iteration; nothing it computes is kept."""
        group = Group(-1, [1, 2, 3, 4, 5], [[6, 7, 8], [9, 10, 11, 12]], [[0.0] * 3, [0.0] * 4])
        for mb in self.batches([group], [torch.tensor([1.0, -1.0])]):
            if self.needs_old_pass:
                self.old_logprobs(mb)
            if self.plan.separate_phases:
                self.ref_logprobs(mb)
            self.accumulate(mb)
        self._reset()

    def _reset(self) -> None:
        self.tokens = 0
        self.loss_sum = 0.0
        self.kl_sum = 0.0
        self.extra_sums = dict.fromkeys(self.loss.token_stats, 0.0)  # the loss's own per-token sums
        # prompt index -> [G], groups trained so far
        self.iteration_rewards: dict[int, list[float]] = {}
        # engine.shared_prompt=auto: one per micro-batch trained
        self.layout_choices: list[dict] = []
        self.policy.zero_grad(set_to_none=True)

    def begin(self) -> None:
        self._reset()

    def train(self, rec, k: int, groups: list[Group],
              answers: dict[int, str]) -> dict[int, list[float]]:
        """Reward, advantages, old/ref log-probs and gradient accumulation for these groups, phase
        by phase, recorded on rec (the sync shard, or one arrived group); -> their rewards (prompt
        index -> [G])."""
        rewards: dict[int, list[float]] = {}
        with rec.stage(Stage.REWARD, k):
            scores = [self.rewards(g, answers[g.prompt_index]) for g in groups]
        with rec.stage(Stage.ADVANTAGE, k):
            for g, r in zip(groups, scores):
                rewards[g.prompt_index] = r.tolist()
            mbs = self.batches(groups, [self.advantages(r) for r in scores])
        # not with tri-model (old = detached policy) nor A-3PO's loglinear pi_prox
        if self.needs_old_pass:
            with rec.stage(Stage.OLD_LOGPROB, k):
                for mb in mbs:
                    self.old_logprobs(mb)
                    # per micro-batch: a long stage still shows progress to the watchdog
                    progress.beat()
        if self.plan.separate_phases:
            with rec.stage(Stage.REF_LOGPROB, k):
                for mb in mbs:
                    self.ref_logprobs(mb)
                    progress.beat()
        with rec.stage(Stage.UPDATE, k):
            for mb in mbs:
                self.accumulate(mb)  # -> the loss
                progress.beat()
        self.iteration_rewards.update(rewards)
        return rewards

    def wait_trained(self, k: int) -> None:
        """Nothing to wait for: train() ran every phase in this process already."""

    def finish(self, rec, k: int) -> tuple[dict, dict[int, list[float]]]:
        """The iteration's optimizer step (all-reduced over the ranks first), recorded on rec; ->
        (step stats, rewards of every group)."""
        rewards = self.iteration_rewards
        with rec.stage(Stage.OPTIMIZER_STEP, k):
            if self.world > 1:
                self.all_reduce()
            stats = self.step()
        return stats, rewards

    def close(self) -> None:
        pass

    def rewards(self, group: Group, ground_truth: str) -> torch.Tensor:
        """[G] GSM8K rule rewards of the group's decoded responses."""
        return torch.tensor([gsm8k_reward(self.tok.decode(r),
                                          ground_truth) for r in group.responses],
                            dtype=torch.float32)

    def micro_batches(self, group: Group, advantages: torch.Tensor,
                      k: int | None = None) -> list[MicroBatch]:
        """The group's responses k at a time (default train.micro_batch_size)."""
        k = k or self.cfg.train.micro_batch_size
        tv = group.token_versions
        return [MicroBatch(group.prompt_index, group.prompt_ids, group.responses[i:i + k],
                           advantages[i:i + k],
                           behaviour_logprobs=group.behaviour_logprobs[i:i + k],
                           behaviour_version=group.version,
                           behaviour_token_versions=tv[i:i + k] if tv is not None else None)
                for i in range(0, len(group.responses), k)]

    def batches(self, groups: list[Group], advantages: list[torch.Tensor]) -> list:
        """The micro-batches these groups train in: micro_batch_size responses of one group each, or
        with train.micro_batch_tokens the groups' responses packed across groups up to that many
        tokens (micro_batch.py; a group is one shared-prompt document where the layout packs it)."""
        budget = self.cfg.train.micro_batch_tokens
        if budget is None:
            return [mb for g, adv in zip(groups, advantages) for mb in self.micro_batches(g, adv)]
        whole = [self.micro_batches(g, adv, len(g.responses))[0]
                 for g, adv in zip(groups, advantages)]
        return pack_by_tokens(whole, budget, self.shares_prompt)

    def shares_prompt(self, mb: MicroBatch) -> bool:
        """Whether this group's responses share one copy of its prompt (engine.shared_prompt; auto:
        the cost model's choice for the group)."""
        sp = self.cfg.engine.shared_prompt
        if self.auto_layout is not None:
            return self.auto_layout.choose(mb.prompt_ids, mb.responses).packed
        return bool(sp) and len(mb.responses) > 1

    @property
    def needs_old_pass(self) -> bool:
        """Whether the old_logprob phase runs: separate passes, and a loss that uses pi_old /
        pi_prox."""
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
        # the choice its passes made (a pure function of the lengths)
        if self.auto_layout is not None:
            for part in mb.parts():
                choice = self.auto_layout.choose(part.prompt_ids, part.responses)
                self.layout_choices.append({"prompt": part.prompt_index,
                                            "responses": len(part.responses),
                                            **choice.as_dict()})
        logp, mask = grpo.pad_logprobs(logp)
        # None: loglinear skipped its pass
        old = grpo.pad_logprobs(old)[0] if old is not None else None
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
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(),
                                                   self.cfg.train.max_grad_norm)
        self.optimizer.step()
        self.version += 1
        stats = {"loss": self.loss_sum / n, "kl": self.kl_sum / n, "grad_norm": float(grad_norm),
                 "tokens": self.tokens}
        stats.update({f"{key}_mean": v / n for key, v in self.extra_sums.items()})
        if self.auto_layout is not None:  # this rank's; DataParallelTrainer gathers every rank's
            stats["shared_prompt_choices"] = self.layout_choices
        if self.compiled:  # this process's compilations so far (results.json lifecycle `compile`)
            stats["compile"] = CompileLog.stats()
        self._reset()
        return stats

    def weights(self) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self.policy.named_parameters()}

    def publish(self, iteration: int | None) -> dict[str, torch.Tensor]:
        """The weights to hand to rollout workers (DataParallelTrainer's interface; nothing to copy
        here)."""
        return self.weights()

    def all_reduce(self) -> None:
        """Sum token counts, the loss's sums and gradients over the ranks (one flat buffer for the
        gradients), so that every rank's step is the same step on the same numbers."""
        params = list(self.policy.parameters())
        device = params[0].device
        sums = [self.tokens, self.loss_sum, self.kl_sum, *self.extra_sums.values()]
        # [len(sums) + n_params]: the sums, then 1 per parameter that has a gradient on this rank
        counts = torch.tensor(sums + [p.grad is not None for p in params], dtype=torch.float64,
                              device=device)
        dist.all_reduce(counts)
        reduced = counts[:len(sums)].tolist()
        self.tokens, self.loss_sum, self.kl_sum = int(reduced[0]), reduced[1], reduced[2]
        self.extra_sums = dict(zip(self.extra_sums, reduced[3:]))
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])  # [sum of numel]
        dist.all_reduce(flat)
        offset = 0
        for p, has in zip(params, counts[len(sums):].tolist()):
            n = p.numel()
            # A parameter no rank touched keeps grad None, as in one trainer (AdamW then skips it).
            p.grad = flat[offset:offset + n].view_as(p).clone() if has else None
            offset += n
