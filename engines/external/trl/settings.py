"""RunConfig -> TRL's `GRPOConfig`: the same work, the same loss, and every setting that cannot be
equal.

What a TRL iteration is: one generation of the iteration's prompts x G samples, trained as
train.ppo_mini_batches optimizer steps (1: on-policy, every sample in one step, rlbench's update;
more: TRL's off-policy setting, `steps_per_generation` = that many times
`gradient_accumulation_steps`, as VERL's ppo_mini_batches splits an iteration). Each of the W ranks
(one per device, data parallel, as rlbench's sync) holds `train.micro_batch_size` sequences per
forward/backward and accumulates P*G / (W * micro_batch_size * mini-batches) of them per step.

Settings made equal, and how (tests/unit/engines/test_trl_loss.py checks the loss and gradient on
one batch):
  - loss aggregation: loss_type="dapo", the token sum over the generation batch / its token count,
    which on-policy is rlbench's token mean over the whole iteration (TRL's default loss_type too);
  - advantages: scale_rewards="group", (r - mean) / (unbiased std + eps) per group; TRL's eps is
    fixed at 1e-4, so equal loss needs rlbench's train.adv_eps=1e-4 (`--ablation peers` sets it);
  - KL: beta = train.kl_coef on TRL's k3 estimator, which is VERL's low_var_kl (only that one exists
    there), and use_bias_correction_kl=False: TRL's default multiplies the KL term by the importance
    ratio, which changes its gradient even on-policy (DeepSeek-V3.2's unbiased estimator; VERL has
    no such factor);
  - clipping: epsilon = epsilon_high = train.clip_ratio; delta = train.clip_ratio_c is VERL's dual
    clip: for A < 0, max(r, clip(r)) capped at delta is min(loss, -A c) of VERL (for A > 0 the cap
    never binds because delta > 1 + epsilon);
  - precision: the weights in model.dtype, no autocast (GRPOConfig's default is bf16=True);
  - what an iteration costs (cost_settings.py checks every one against rlbench's, from the arguments
    TRL resolved): no activation (gradient) checkpointing, which GRPOConfig turns on by default and
    rlbench's trainer never does (recomputing every layer's forward in the backward costs about a
    fifth of the update); no torch.compile, no Liger kernels, as rlbench; one generation of the
    whole iteration;
  - optimizer: AdamW (torch), lr, betas, eps 1e-8, weight decay, grad-norm clip, constant schedule,
    no warm-up; sampling: temperature (also in the log-probs), top_p, top_k off; the seed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields as dataclass_fields

from rlbench.core.components import evaluation_backend
from rlbench.core.errors import UserError

# engine.device values a TRL cell runs on (auto: CUDA where a GPU is visible)
DEVICES = ("cpu", "cuda", "auto")
TRL_ADV_EPS = 1e-4  # trl/trainer/grpo_trainer.py: advantages / (std_rewards + 1e-4)
CB_PAGE = 256  # tokens per page of continuous batching's KV cache (transformers' default page_size)
# a rank waits at the step barrier while other cells take their turns (run.interleave)
DDP_TIMEOUT_S = 7200


@dataclass(frozen=True)
class Difference:
    """A setting the two engines cannot share: what each does, and why it stays different."""

    setting: str
    rlbench: str
    trl: str
    why: str


@dataclass(frozen=True)
class TrlOptions:
    """TRL's own settings that a cell of `--ablation peers` varies (no rlbench config key: rlbench's
    sampler always batches continuously)."""

    # use_transformers_continuous_batching: transformers' paged generate_batch
    continuous_batching: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


# the Difference that says how each engine generates (cost_settings.py names it)
SAMPLING = "sampling"
_SAME_DISTRIBUTION = ("each engine's own generation is what is measured; same temperature, top_p "
                      "and cap, so the same distribution, not the same samples")
PADDED_GENERATE = Difference(
    SAMPLING,
    "built-in KV-cache sampler, continuous batching (rollout.max_num_seqs in flight), one RNG "
    "stream per (seed, iteration, prompt, sample)",
    "model.generate on the rank's whole generation batch, left-padded, "
    "until every sequence ends (use_transformers_continuous_batching off, TRL's default); torch's "
    "global RNG seeded per rank", _SAME_DISTRIBUTION)
CONTINUOUS_GENERATE = Difference(
    SAMPLING,
    "built-in KV-cache sampler, continuous batching (rollout.max_num_seqs in flight), one RNG "
    "stream per (seed, iteration, prompt, sample)",
    "transformers' continuous batching (generate_batch: a paged KV cache sized for the rank's "
    "generation batch, at most rollout.max_num_seqs requests per step), its own random seed per "
    "call", _SAME_DISTRIBUTION)
DIFFERENCES: tuple[Difference, ...] = (
    Difference("padding in training",
               "a micro-batch's rows padded to its group's longest response (its prompt is the "
               "group's one prompt)",
               "every micro-batch padded to the longest prompt (left) and "
               "completion (right) of the rank's generation batch",
               "each engine's own batching; padding tokens carry no loss, so the same loss "
               "(tests/unit/engines/test_trl_loss.py), different cost"),
    Difference("old log-probs (on-policy)",
               "a separate forward pass (old_logprob stage; engine.tri_model "
               "skips it)", "skipped: ratio against the detached policy log-probs",
               "TRL's design; equal values (the same weights), different cost"),
    Difference("log-prob forward",
               "the LM head over the response positions (rows padded to the group's longest "
               "response), then a log-softmax over them",
               "a fused LM head over the response positions in tiles (no full logits), plus each "
               "position's entropy", "TRL's kernel; equal log-probs"),
    Difference("KL clamps",
               "low_var_kl clamps log-ratio to [-20, 20] and the estimate to [-10, 10]",
               "k3 unclamped",
               "equal wherever the clamps do not bind (tests/unit/engines/test_trl_loss.py checks "
               "they do not)"),
    Difference("ratio clamp", "exp(clamp(logp - old, -20, 20))", "exp(logp - old)",
               "equal for log-ratios within 20"),
    Difference("advantage epsilon", "train.adv_eps (VERL's 1e-6 by default)", "1e-4, fixed",
               "TRL has no setting; --ablation peers sets train.adv_eps=1e-4 for every cell"),
    Difference("mini-batch token mean (ppo_mini_batches > 1)",
               "not run (rlbench's engines take one step per iteration)",
               "each step divides by the generation batch's tokens / steps, not by its own tokens",
               "TRL's dapo normaliser"),
    Difference("gradient all-reduce", "one flat all-reduce before the optimizer step",
               "DDP buckets all-reduced during the last micro-batch's backward",
               "same sum, other schedule"),
    Difference("weight sync",
               "the trainer's weights copied into the sampler's model each iteration",
               "none: generation runs on the training model",
               "TRL without vLLM has no second copy"),
    Difference("step boundary", "the driver starts every rank's iteration",
               "a barrier before each iteration (not timed), so no rank's window includes "
               "another's evaluation or logging",
               "rlbench's window starts at the dispatch; this is its equivalent"),
)


def mini_batches(cfg) -> int:
    return cfg.train.ppo_mini_batches


def check(cfg, world: int) -> None:
    """Refuse (UserError, exit 2) what TRL cannot run as the config asks, naming the key."""
    t, r, e = cfg.train, cfg.rollout, cfg.engine
    own = evaluation_backend().name  # the sampler rlbench evaluates every cell with
    refusals = {
        "train.kl_type": (t.kl_type != "low_var_kl",
                          "TRL's GRPOTrainer computes only the k3 estimator (VERL's low_var_kl); "
                          "allowed: low_var_kl"),
        "rollout.group_size": (r.group_size < 2, "TRL's GRPO needs at least 2 samples per prompt"),
        "rollout.response_length": (r.response_length != "eos",
                                    "TRL's generation ends at EOS or the cap; allowed: eos"),
        "rollout.backend": (r.backend != own,
                            "--engine trl generates with TRL's own model.generate and "
                            f"evaluates with rlbench's evaluation sampler; allowed: {own}"),
        "engine.device": (e.device not in DEVICES,
                          "--engine trl runs one rank per CPU core or per CUDA GPU; "
                          f"allowed: {', '.join(DEVICES)}"),
        "engine.tri_model": (e.tri_model,
                             "an rlbench optimisation TRL does not have; allowed: false"),
        "engine.shared_prompt": (e.shared_prompt,
                                 "an rlbench optimisation TRL does not have; allowed: false"),
    }
    for key, (bad, why) in refusals.items():
        if bad:
            raise UserError(f"--engine trl: {key}={_value(cfg, key)!r}: {why}")
    per_step = world * t.micro_batch_size * mini_batches(cfg)
    if cfg.batch_size % per_step:
        raise UserError(
            f"--engine trl: the iteration's {cfg.batch_size} samples (train.prompts_per_iteration "
            f"x rollout.group_size) must split into {world} ranks x "
            f"train.micro_batch_size={t.micro_batch_size} x "
            f"train.ppo_mini_batches={mini_batches(cfg)} steps (a multiple of {per_step})")


def _value(cfg, dotted: str):
    section, key = dotted.split(".")
    return getattr(getattr(cfg, section), key)


def grpo_kwargs(cfg, world: int, output_dir: str, options: TrlOptions = TrlOptions(),
                longest_prompt: int = CB_PAGE, kind: str = "cpu") -> dict:
    """GRPOConfig's keyword arguments for cfg on `world` data-parallel ranks of device `kind` (cpu:
    a core each, gloo; cuda: a GPU each, NCCL; check() passed); longest_prompt: the longest prompt
    of the run in tokens (sizes continuous batching's KV cache)."""
    t, r, run = cfg.train, cfg.rollout, cfg.run
    n = mini_batches(cfg)
    accumulation = cfg.batch_size // (world * t.micro_batch_size * n)
    return dict(
        # what an iteration costs, as rlbench's (cost_settings.py): GRPOConfig checkpoints
        # activations by default; transformers 5 names it activation_checkpointing
        # (gradient_checkpointing: its alias)
        activation_checkpointing=False, torch_compile=False, use_liger_kernel=False,
        **generation(cfg, world, options, longest_prompt),
        output_dir=output_dir, use_cpu=kind == "cpu", seed=run.seed, data_seed=run.seed,
        report_to="none",
        save_strategy="no", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0,
        ddp_timeout=DDP_TIMEOUT_S, ddp_find_unused_parameters=False,
        # the weights in model.dtype and no autocast: GRPOConfig defaults to bf16=True (autocast on
        # CPU too)
        model_init_kwargs={"dtype": cfg.model.dtype, "attn_implementation": "sdpa"}, bf16=False,
        fp16=False,
        # the batch: one generation per iteration, ppo_mini_batches optimizer steps per generation
        per_device_train_batch_size=t.micro_batch_size, gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation * n, num_generations=r.group_size,
        max_steps=run.iterations * n,
        shuffle_dataset=False,  # the rows are already the iterations' prompts in order (data.py)
        # sampling
        max_completion_length=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=0,
        min_p=None, repetition_penalty=1.0,
        # the loss (module docstring)
        loss_type="dapo", scale_rewards="group", beta=t.kl_coef, use_bias_correction_kl=False,
        epsilon=t.clip_ratio,
        epsilon_high=t.clip_ratio, delta=t.clip_ratio_c, num_iterations=1,
        importance_sampling_level="token",
        mask_truncated_completions=False, disable_dropout=True,
        # the optimizer
        optim="adamw_torch", learning_rate=t.lr, adam_beta1=t.betas[0], adam_beta2=t.betas[1],
        adam_epsilon=1e-8, weight_decay=t.weight_decay, max_grad_norm=t.max_grad_norm,
        lr_scheduler_type="constant", warmup_steps=0,
    )


# Names newer transformers use -> the names before them, where a class lacks the new one
# (transformers 5.17, a GPU image's): TrainingArguments' activation checkpointing (5.2x:
# `gradient_checkpointing` a deprecated alias), continuous batching's tokens per KV-cache page
# (after 5.17: `block_size` a deprecated alias)
OLD_NAMES = {"activation_checkpointing": "gradient_checkpointing", "page_size": "block_size"}
CB_CONFIG = "transformers_continuous_batching_config"


def named_for(config_class, kwargs: dict, cb_class=None) -> dict:
    """kwargs under the names `config_class` (GRPOConfig) and `cb_class` (transformers'
    ContinuousBatchingConfig, for the continuous batching settings) have: a new name the class lacks
    becomes its old one (OLD_NAMES), where passing it would be a TypeError."""
    out = _renamed(kwargs, config_class)
    if out.get(CB_CONFIG) and cb_class is not None:
        out[CB_CONFIG] = _renamed(out[CB_CONFIG], cb_class)
    return out


def _renamed(kwargs: dict, cls) -> dict:
    fields = {f.name for f in dataclass_fields(cls)}
    return {(OLD_NAMES[k] if k in OLD_NAMES and k not in fields else k): v
            for k, v in kwargs.items()}


def generation(cfg, world: int, options: TrlOptions, longest_prompt: int) -> dict:
    """GRPOConfig's generation path: model.generate (TRL's default), or transformers' continuous
    batching with its paged KV cache sized for what a rank generates. Left to itself, generate_batch
    sizes the cache from half the free memory (on CPU: the machine's RAM), which took minutes to
    allocate here and would take memory from every other process on the machine."""
    if not options.continuous_batching:
        return {"use_transformers_continuous_batching": False}
    per_rank = cfg.batch_size // world
    # as rlbench's sampler: rollout.max_num_seqs at most
    in_flight = min(cfg.rollout.max_num_seqs, per_rank)
    # a sequence's pages, rounded up
    pages = -(-(longest_prompt + cfg.rollout.max_new_tokens) // CB_PAGE)
    return {"use_transformers_continuous_batching": True, CB_CONFIG: {
        "page_size": CB_PAGE, "num_blocks": per_rank * pages, "max_requests_per_batch": in_flight,
        # every sequence in flight prefilled in one step
        "max_batch_tokens": in_flight * longest_prompt}}


CUDA_GRAPHS = Difference(
    "decode step on CUDA", "replayed as CUDA graphs (rollout.cuda_graphs), one per batch bucket",
    "launched operator by operator each step",
    "each engine's own generation (the sampling row); TRL's generate has no graph capture of its "
    "own without a static cache and torch.compile, which TRL does not set up")


def differences(cfg, options: TrlOptions = TrlOptions(), kind: str = "cpu") -> list[dict]:
    """The settings that differ for this config on device `kind` (results.json
    external.differences)."""
    sampling = CONTINUOUS_GENERATE if options.continuous_batching else PADDED_GENERATE
    out = [d.__dict__ for d in (sampling, *DIFFERENCES)]
    if kind == "cuda" and cfg.rollout.cuda_graphs is not False:
        out.append(CUDA_GRAPHS.__dict__)
    if cfg.train.adv_eps != TRL_ADV_EPS:
        out.append(Difference("advantage epsilon (this run)", f"train.adv_eps={cfg.train.adv_eps}",
                              f"{TRL_ADV_EPS}",
                              "set train.adv_eps=1e-4 for equal advantages").__dict__)
    return out
