"""VERL baseline: RunConfig -> `python -m verl.trainer.main_ppo` (GRPO, vLLM rollout) -> rlbench results.

What VERL does that this adapter relies on (read in verl 0.9.1; see tests/fixtures/external/README.md):
  - data: the parquet of `examples/data_preprocess/gsm8k.py` (data_source "openai/gsm8k", chat
    `prompt`, `reward_model.ground_truth`); that data source routes VERL's default reward to
    `verl/utils/reward_score/gsm8k.py` (strict `#### <number>` rule, the rule rlbench uses);
  - metrics: the trainer logs one dict per step through `verl.utils.tracking.Tracking`; the "file"
    backend (`FileLogger`) appends `{"step": N, "data": {...}}` lines to the path in the environment
    variable VERL_FILE_LOGGER_PATH (default: ./<project>/<experiment>.jsonl). Step 0 holds the
    validation before training, step k >= 1 the k-th training step (and validation when it ran);
  - `perf/throughput = perf/total_num_tokens / (timing_s/step * n_gpus)`, total tokens = non-padding
    prompt + response tokens of the step's batch, n_gpus = all GPUs of the resource pools
    (`verl/trainer/ppo/metric_utils.py`): the same formula as rlbench's TPSPD;
  - stage timers (`marked_timer`): gen, reward, old_log_prob, ref, adv, update_actor, update_weights
    inside `step`; `testing` (validation) runs outside `step`, so neither TPSPD counts evaluation.
"""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
import re
import sys
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
import torch

from rlbench.core.errors import UserError
from rlbench.core.record.stages import Stage
from rlbench.core.results.schema import read_jsonl
from rlbench.engines.data.source import load_dataset
from rlbench.engines.external.common import (cell_results, flag_tpspd, launch_and_record, make_iteration,
                                             not_installed)

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'  # VERL's gsm8k.py
FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"
NOT_INSTALLED = ("--engine verl needs VERL installed (pip install 'rlbench[verl]' on a GPU machine, or "
                 "use Dockerfile.gpu); not found in this environment")
# VERL timer name (logged as timing_s/<name>) -> rlbench stage. Not mapped (kept raw under
# `external.timing_s`): step (the iteration), testing (evaluation, outside step), save_checkpoint,
# values/update_critic (no critic in GRPO), start_profile/stop_profile.
STAGE_MAP = {"gen": Stage.ROLLOUT, "reward": Stage.REWARD, "old_log_prob": Stage.OLD_LOGPROB,
             "ref": Stage.REF_LOGPROB, "adv": Stage.ADVANTAGE, "update_actor": Stage.UPDATE,
             "update_weights": Stage.WEIGHT_SYNC}


def verl_prompt(problem) -> str:
    """VERL's GSM8K user message: the question, a space, the step-by-step instruction."""
    return f"{problem.question} {INSTRUCTION}"


def verl_rows(problems: Sequence, prompt_fn: Callable | None = None, split: str = "train") -> list[dict]:
    """Rows exactly as VERL's examples/data_preprocess/gsm8k.py builds them (problem.solution is
    GSM8K's raw answer text ending in '#### <n>', problem.answer the number after it)."""
    prompt_fn = prompt_fn or verl_prompt
    return [{"data_source": DATA_SOURCE,
             "prompt": [{"role": "user", "content": prompt_fn(p)}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": p.answer},
             "extra_info": {"split": split, "index": i, "answer": p.solution, "question": p.question}}
            for i, p in enumerate(problems)]


def write_verl_parquet(problems: Sequence, path: str | Path, prompt_fn: Callable | None = None,
                       split: str = "train") -> Path:
    """Writes `problems` as a VERL GSM8K parquet (columns data_source, prompt, ability, reward_model,
    extra_info); `prompt_fn(problem) -> str` makes the user message (default: VERL's own)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(verl_rows(problems, prompt_fn, split)).to_parquet(path, index=False)
    return path


def prompt_token_bound(problems: Sequence, prompt_fn: Callable | None = None, template_slack: int = 128) -> int:
    """An upper bound on prompt tokens for data.max_prompt_length: UTF-8 bytes of the longest user
    message (a byte-level BPE token is at least one byte) plus room for the chat template."""
    prompt_fn = prompt_fn or verl_prompt
    longest = max((len(prompt_fn(p).encode()) for p in problems), default=0)
    return -(-(longest + template_slack) // 64) * 64  # round up to a multiple of 64


def _hydra(value) -> str:
    """A Python value as a Hydra override value (quoted when it is not a plain token)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9_./-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def verl_overrides(cfg, train_parquet, val_parquet, log_path, n_gpus: int, nnodes: int = 1, *,
                   max_prompt_length: int = 512, rollout_tp: int = 1) -> dict[str, object]:
    """RunConfig -> VERL config keys (ppo_trainer.yaml) and values, in VERL's GSM8K GRPO example style."""
    if not cfg.model.path:
        raise UserError("--engine verl needs model.path: a local Hugging Face model directory")
    t, r, run = cfg.train, cfg.rollout, cfg.run
    if t.prompts_per_iteration % t.ppo_mini_batches:
        raise UserError(f"--engine verl: train.ppo_mini_batches={t.ppo_mini_batches} must divide "
                        f"train.prompts_per_iteration={t.prompts_per_iteration} (VERL's mini-batch is in prompts)")
    arr, actor, rollout = "actor_rollout_ref", "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    return {
        "algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": False,
        "data.train_files": str(train_parquet), "data.val_files": str(val_parquet),
        "data.train_batch_size": t.prompts_per_iteration,
        "data.max_prompt_length": max_prompt_length, "data.max_response_length": r.max_new_tokens,
        "data.filter_overlong_prompts": True, "data.truncation": "error", "data.seed": run.seed,
        f"{arr}.model.path": cfg.model.path, f"{arr}.model.use_remove_padding": True,
        f"{actor}.optim.lr": t.lr, f"{actor}.optim.weight_decay": t.weight_decay,
        f"{actor}.optim.betas": list(t.betas), f"{actor}.grad_clip": t.max_grad_norm,
        f"{actor}.ppo_mini_batch_size": t.prompts_per_iteration // t.ppo_mini_batches,
        f"{actor}.ppo_micro_batch_size_per_gpu": t.micro_batch_size,
        f"{actor}.use_kl_loss": True, f"{actor}.kl_loss_coef": t.kl_coef, f"{actor}.kl_loss_type": t.kl_type,
        f"{actor}.clip_ratio": t.clip_ratio,
        # null = no dual clip; VERL always applies one, and a bound above exp(20) (its ratio clamp) never binds
        f"{actor}.clip_ratio_c": t.clip_ratio_c if t.clip_ratio_c is not None else 1e9,
        f"{actor}.entropy_coeff": 0, f"{actor}.loss_agg_mode": "token-mean",
        f"{rollout}.name": "vllm", f"{rollout}.n": r.group_size, f"{rollout}.temperature": r.temperature,
        f"{rollout}.top_p": r.top_p, f"{rollout}.seed": run.seed,
        f"{rollout}.tensor_model_parallel_size": rollout_tp,
        f"{rollout}.log_prob_micro_batch_size_per_gpu": t.micro_batch_size,
        f"{rollout}.val_kwargs.do_sample": False, f"{rollout}.val_kwargs.n": 1,  # greedy pass@1
        f"{arr}.ref.log_prob_micro_batch_size_per_gpu": t.micro_batch_size,
        "trainer.n_gpus_per_node": n_gpus, "trainer.nnodes": nnodes,
        "trainer.total_training_steps": run.iterations, "trainer.total_epochs": run.iterations,
        # rlbench's eval_every=0 means "before and after"; VERL always validates at the last step
        "trainer.test_freq": run.eval_every or run.iterations, "trainer.val_before_train": True,
        "trainer.save_freq": -1, "trainer.critic_warmup": 0, "trainer.logger": ["console", "file"],
        "trainer.project_name": "rlbench", "trainer.experiment_name": run.name,
        # FileLogger reads its path from the environment of the process that logs (a Ray actor)
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{FILE_LOGGER_ENV}": str(Path(log_path).resolve()),
    }


def verl_command(cfg, train_parquet, val_parquet, log_path, n_gpus: int, nnodes: int = 1, *,
                 max_prompt_length: int = 512, rollout_tp: int = 1, python: str | None = None) -> list[str]:
    """argv of a VERL GRPO run for `cfg`; n_gpus is GPUs per node (VERL's trainer.n_gpus_per_node).

    The JSONL metrics land at `log_path`: the command passes it to Ray's workers; also set
    VERL_FILE_LOGGER_PATH=log_path in the launching environment (run_verl does).
    """
    over = verl_overrides(cfg, train_parquet, val_parquet, log_path, n_gpus, nnodes,
                          max_prompt_length=max_prompt_length, rollout_tp=rollout_tp)
    return [python or sys.executable, "-m", "verl.trainer.main_ppo",
            *(f"{k}={_hydra(v)}" for k, v in over.items())]


def read_verl_jsonl(path: str | Path) -> list[tuple[int, dict]]:
    """(step, metrics) per line of a VERL FileLogger file; a line cut short by a crash ends it."""
    return [(int(row["step"]), row["data"]) for row in read_jsonl(Path(path)) if "data" in row]


def eval_accuracy(data: dict, data_source: str = DATA_SOURCE) -> tuple[str, float] | None:
    """(key, value) of VERL's core validation metric for `data_source`, e.g.
    val-core/openai/gsm8k/reward/mean@1 (greedy pass@1 with the rule reward), or None."""
    keys = sorted(k for k in data if k.startswith(f"val-core/{data_source}/") and "/mean@" in k)
    return (keys[0], float(data[keys[0]])) if keys else None


def _iteration(step: int, data: dict, cfg, n_gpus: int, start: float) -> dict:
    """One rlbench iteration record from VERL's metrics of training step `step` (1-based)."""
    wall = float(data.get("perf/time_per_step", data["timing_s/step"]))
    tokens = int(round(data["perf/total_num_tokens"]))
    p_mean, r_mean = data.get("prompt_length/mean"), data.get("response_length/mean")
    samples = round(tokens / (p_mean + r_mean)) if p_mean is not None and r_mean else cfg.batch_size
    prompt_tokens = int(round(p_mean * samples)) if p_mean is not None else 0
    timing = {k.removeprefix("timing_s/"): float(v) for k, v in data.items() if k.startswith("timing_s/")}
    stage_s = {STAGE_MAP[k].value: v for k, v in timing.items() if k in STAGE_MAP}
    acc = eval_accuracy(data)
    return make_iteration(
        iteration=step - 1, start=start, wall_s=wall, num_samples=samples, prompt_tokens=prompt_tokens,
        response_tokens=tokens - prompt_tokens, devices=n_gpus, stage_s=stage_s,
        reward_mean=float(data.get("critic/score/mean", 0.0)),
        response_len_mean=float(r_mean or 0.0), response_len_max=int(data.get("response_length/max", 0)),
        loss=float(data.get("actor/pg_loss", data.get("actor/loss", 0.0))),
        grad_norm=float(data.get("actor/grad_norm", 0.0)), kl=float(data.get("actor/kl_loss", 0.0)),
        warmup=step - 1 < cfg.run.warmup_iterations, eval_accuracy=acc[1] if acc else None,
        external={"step": step, "perf/throughput": data.get("perf/throughput"),
                  "perf/total_num_tokens": data["perf/total_num_tokens"], "timing_s": timing,
                  "expected_samples": cfg.batch_size})


def parse_verl_jsonl(path: str | Path, cfg, n_gpus: int, version: str | None = None) -> dict:
    """A VERL FileLogger JSONL -> an rlbench cell results dict (cell "verl").

    n_gpus: all GPUs of the run (VERL's resource pools), the TPSPD divisor. Iteration k is VERL step
    k+1; evals[i]["iteration"] counts finished iterations (0 = before training), as rlbench's do.
    """
    iterations, evals, t = [], [], 0.0
    for step, data in read_verl_jsonl(path):
        acc = eval_accuracy(data)
        if acc:
            evals.append({"iteration": step, "accuracy": acc[1], "key": acc[0]})
        if "perf/total_num_tokens" in data and ("timing_s/step" in data or "perf/time_per_step" in data):
            it = _iteration(step, data, cfg, n_gpus, t)
            iterations.append(it)
            t = it["end"] + float(data.get("timing_s/testing", 0.0))
    warnings = flag_tpspd(iterations, "perf/throughput")
    if iterations and iterations[-1]["num_samples"] != cfg.batch_size:
        warnings.append(f"VERL trained {iterations[-1]['num_samples']} samples per step, the config "
                        f"asks for {cfg.batch_size} (prompts_per_iteration x group_size)")
    status = "complete" if len(iterations) >= cfg.run.iterations else "incomplete"
    return cell_results(cfg, cell="verl", framework="verl", version=version, iterations=iterations,
                        evals=evals, status=status, warnings=warnings,
                        external={"metrics_file": str(path), "devices": n_gpus,
                                  "tpspd_reference": "perf/throughput"})


def _visible_gpus() -> int:
    return torch.cuda.device_count()


def run_verl(cfg, out_dir: str | Path, *, n_gpus: int | None = None, nnodes: int = 1,
             prompt_fn: Callable | None = None, echo: bool = True) -> dict:
    """Runs VERL GRPO on cfg's data and model; writes out_dir/results.json and returns it.

    n_gpus: GPUs per node (default: all CUDA GPUs torch sees). Raises UserError when VERL is not
    installed, the model is not a local HF directory, or no GPU is visible.
    """
    if importlib.util.find_spec("verl") is None:
        raise not_installed(NOT_INSTALLED)
    if cfg.model.kind != "hf":
        raise UserError("--engine verl needs model.kind=hf and model.path set to a local Hugging Face "
                        f"model directory (got model.kind={cfg.model.kind!r})")
    n_gpus = n_gpus or _visible_gpus()
    if not n_gpus:
        raise UserError("--engine verl needs CUDA GPUs; torch sees none on this machine")

    out = Path(out_dir).resolve()
    ds = load_dataset(cfg.data, cfg.run.seed)
    train = write_verl_parquet(ds.train, out / "data" / "train.parquet", prompt_fn, "train")
    val = write_verl_parquet(ds.eval, out / "data" / "test.parquet", prompt_fn, "test")
    metrics_file = out / "verl_metrics.jsonl"
    argv = verl_command(cfg, train, val, metrics_file, n_gpus, nnodes,
                        max_prompt_length=prompt_token_bound([*ds.train, *ds.eval], prompt_fn))
    return _launch(cfg, out, argv, metrics_file, n_gpus * nnodes, echo)


def verl_version() -> str | None:
    try:
        return md.version("verl")
    except md.PackageNotFoundError:
        return None


def _launch(cfg, out: Path, argv: list[str], metrics_file: Path, devices: int, echo: bool) -> dict:
    """Runs argv with VERL's file logger pointed at metrics_file; results.json whatever happened."""
    return launch_and_record(argv, out, out / "verl.log", "VERL",
                             lambda: parse_verl_jsonl(metrics_file, cfg, devices, version=verl_version()),
                             env={FILE_LOGGER_ENV: str(metrics_file)}, cwd=out, echo=echo)
