"""MindSpeed-RL baseline: RunConfig -> `cli/train_grpo.py` YAML -> its log -> rlbench results.

What MindSpeed-RL does that this adapter relies on (read in Ascend/MindSpeed-RL, April 2026; see
tests/fixtures/external/README.md):
  - configuration: one Hydra YAML in the layout of MindSpeed-RL's configs/grpo_qwen25_7b_A3.yaml
    (sections `defaults` (model architecture from MindSpeed-RL's configs/model/),
    `megatron_training`, `actor_config`, `rl_config`, `generate_config`); unknown keys are errors
    (config_cls/base_config.py); rl_config.mini_batch_size is in prompts and multiplied by
    n_samples_per_prompt (rl_config.py);
  - metrics: after each iteration the GRPO trainer (trainer/grpo_trainer_hybrid.py) logs
    `Loggers.info(metrics, iteration, train_iters)`, formatted by utils/loggers.py handle_msg as
    `[time] iteration: 3 / 10 | key : 1.2345 | actor/lr : 1.000000e-06 | ...` (4 decimals; keys
    containing "lr" in %e), behind the logging prefix `time - INFO - `;
  - `e2e_tps = (response_length/mean + prompt_length/mean) * global_batch_size *
    n_samples_per_prompt / world_size / timing/all` (utils/utils.py compute_tps); world_size = actor
    NPUs (+ reference and reward NPUs unless use_integrated_worker): rlbench's TPSPD with world_size
    as devices. Its docs note that on Atlas A3 a "device" is one die (two per card).
  - the GRPO trainer has no validation loop: there is no eval accuracy to report, and its rule
    reward (rl_config.verifier_function, e.g. base_acc) is not VERL's/rlbench's GSM8K strict rule.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from rlbench.core.errors import UserError
from rlbench.core.record.stages import Stage
from rlbench.engines.data.source import load_dataset
from rlbench.engines.external.common import (cell_results, flag_tpspd, launch_and_record,
                                             make_iteration,
                                             not_installed, run_logged, tpspd_check)

HOME_ENV = "MINDSPEED_RL_HOME"
NOT_INSTALLED = (f"--engine mindspeed-rl needs a MindSpeed-RL checkout (git clone of "
                 f"Ascend/MindSpeed-RL, with its Ascend stack: torch_npu, MindSpeed, Megatron-LM, "
                 f"vllm-ascend) named by {HOME_ENV}; not found in this environment")
LINE_RE = re.compile(r"iteration:\s*(\d+)\s*/\s*(\d+)\s*\|(.*)$")
# MindSpeed-RL timing key -> rlbench stage (resharding both ways is the weight sync of the colocated
# actor). Stages may overlap in MindSpeed-RL (its timing/non_overlap_* keys), so stage_s can exceed
# wall_s.
STAGE_MAP = {"timing/rollout": Stage.ROLLOUT, "timing/rule_reward": Stage.REWARD,
             "timing/reward_model": Stage.REWARD, "timing/old_log_p": Stage.OLD_LOGPROB,
             "timing/reference_model": Stage.REF_LOGPROB, "timing/adv": Stage.ADVANTAGE,
             "timing/update": Stage.UPDATE, "timing/resharding_to_infer": Stage.WEIGHT_SYNC,
             "timing/resharding_to_train": Stage.WEIGHT_SYNC}


def mindspeed_config(cfg, data_path: str | Path, n_devices: int, *, model_name: str = "qwen25_7b",
                     load_dir: str | None = None, save_dir: str = "./ckpt",
                     max_prompt_length: int = 512,
                     tp: int = 1, pp: int = 1) -> dict:
    """RunConfig -> MindSpeed-RL GRPO config (integrated worker: actor, reference and rollout share
    all n_devices NPUs, as VERL's colocated sync does). model_name picks MindSpeed-RL's
    configs/model/<name>.yaml; load_dir holds the Megatron-format weights of cfg.model.path;
    data_path is the prefix cli/preprocess_data.py wrote."""
    t, r, run = cfg.train, cfg.rollout, cfg.run
    if t.prompts_per_iteration % t.ppo_mini_batches:
        raise UserError(f"--engine mindspeed-rl: train.ppo_mini_batches={t.ppo_mini_batches} must "
                        f"divide train.prompts_per_iteration={t.prompts_per_iteration}")
    seq_length = max_prompt_length + r.max_new_tokens
    megatron = {
        "model": model_name, "use_fused_rmsnorm": True, "use_mcore_models": True,
        "sequence_parallel": tp > 1,
        "use_flash_attn": True, "no_masked_softmax_fusion": True, "attention_softmax_in_fp32": True,
        "no_gradient_accumulation_fusion": True, "use_fused_swiglu": True,
        "use_fused_rotary_pos_emb": True,
        "bf16": True, "use_distributed_optimizer": True, "tokenizer_type": "PretrainedFromHF",
        "tokenizer_name_or_path": cfg.model.path, "global_batch_size": t.prompts_per_iteration,
        "seq_length": seq_length, "save_interval": run.iterations, "train_iters": run.iterations,
        "stage": "ray_grpo", "attention_dropout": 0.0, "init_method_std": 0.01,
        "hidden_dropout": 0.0,
        "distributed_backend": "nccl", "no_shared_storage": True,
        "dataset_additional_keys": ["labels"],
        "data_path": str(data_path), "split": "100,0,0", "no_shuffle": False,
        "full_shuffle_instruction_dataset": False, "seed": run.seed, "reuse_fp32_param": False}
    actor = {
        "model": model_name, "micro_batch_size": t.micro_batch_size,
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp, "lr": t.lr, "lr_decay_style": "constant", "min_lr": 0.0,
        "weight_decay": t.weight_decay, "lr_warmup_fraction": 0.0, "clip_grad": t.max_grad_norm,
        "adam_beta1": t.betas[0], "adam_beta2": t.betas[1], "finetune": True,
        "load": load_dir or "./ckpt",
        "save": save_dir, "no_load_optim": True, "no_load_rng": True}
    rl = {
        "guarantee_order": False, "use_integrated_worker": True, "blocking": True, "gamma": 1.0,
        "lam": 0.95,
        "actor_forward_micro_batch_size": t.micro_batch_size,
        "ref_forward_micro_batch_size": t.micro_batch_size,
        "adv_estimator": "group_norm", "kl_penalty": t.kl_type, "kl_ctrl_type": "fixed",
        "init_kl_coef": t.kl_coef, "mini_batch_size": t.prompts_per_iteration // t.ppo_mini_batches,
        "max_prompt_length": max_prompt_length, "epochs": 1, "clip_ratio": t.clip_ratio,
        "entropy_coeff": 0.0, "shuffle_mini_batch": False, "n_samples_per_prompt": r.group_size,
        "rule_reward": True, "verifier_function": ["base_acc"], "verifier_weight": [1.0],
        "log_max_throughput": False, "num_cpus_for_local_task": 1.0, "use_tensorboard": False,
        "actor_resource": {"num_npus": n_devices}}
    generate = {
        "trust_remote_code": True, "offload_train_optimizer": True, "offload_train_grad": True,
        "offload_train_param": True, "infer_tensor_parallel_size": tp,
        "infer_pipeline_parallel_size": 1,
        "infer_expert_parallel_size": 1, "max_num_seqs": 1024, "max_model_len": seq_length,
        "max_num_batched_tokens": max(8192, seq_length), "dtype": "bfloat16",
        "gpu_memory_utilization": 0.4,
        "sampling_config": {"logprobs": 1, "max_tokens": r.max_new_tokens, "top_p": r.top_p,
                            "top_k": -1,
                            "min_p": 0.0, "temperature": r.temperature, "detokenize": False}}
    return {"defaults": [{"model": [model_name]}], "megatron_training": megatron,
            "actor_config": actor,
            "rl_config": rl, "generate_config": generate}


def write_mindspeed_config(config: dict, path: str | Path) -> Path:
    """The config as YAML (Hydra reads it by --config-dir/--config-name; the file stem is the
    name)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def mindspeed_home() -> Path | None:
    """The MindSpeed-RL checkout named by MINDSPEED_RL_HOME, if it has cli/train_grpo.py."""
    home = os.environ.get(HOME_ENV)
    return Path(home) if home and (Path(home) / "cli" / "train_grpo.py").is_file() else None


def mindspeed_command(config_path: str | Path, home: str | Path | None = None,
                      python: str | None = None) -> list[str]:
    """argv of cli/train_grpo.py on our YAML; run it with cwd = the checkout. --config-dir adds our
    folder to Hydra's search path, so `defaults: model:` still resolves in the checkout's
    configs/."""
    config_path = Path(config_path).resolve()
    home = Path(home or os.environ.get(HOME_ENV) or ".")
    return [python or sys.executable, str(home / "cli" / "train_grpo.py"),
            "--config-dir", str(config_path.parent), "--config-name", config_path.stem]


def parse_log_line(line: str) -> tuple[int, int, dict[str, float]] | None:
    """'... iteration: 3 / 10 | a : 1.0000 | actor/lr : 1.000000e-06 ' -> (3, 10, {a: 1.0, ...})."""
    m = LINE_RE.search(line)
    if not m:
        return None
    values = {}
    for part in m.group(3).split("|"):
        key, sep, raw = part.partition(" : ")
        if sep:
            try:
                values[key.strip()] = float(raw.strip())
            except ValueError:
                continue  # a non-numeric field is not a metric
    return int(m.group(1)), int(m.group(2)), values


def _reward(m: dict) -> float:
    if "grpo/score/mean" in m:
        return m["grpo/score/mean"]
    per_verifier = [v for k, v in m.items() if k.endswith("_rewards/mean")]
    return per_verifier[0] if per_verifier else m.get("grpo/rewards/mean", 0.0)


def _iteration(it: int, m: dict, cfg, n_devices: int, start: float) -> dict:
    """An rlbench iteration record from one logged MindSpeed-RL iteration (1-based `it`)."""
    gbs = int(m.get("global_batch_size", cfg.train.prompts_per_iteration))
    n = int(m.get("n_samples_per_prompt", cfg.rollout.group_size))
    samples = gbs * n
    stage_s: dict[str, float] = {}
    for key, stage in STAGE_MAP.items():
        if key in m:
            stage_s[stage.value] = stage_s.get(stage.value, 0.0) + m[key]
    return make_iteration(
        iteration=it - 1, start=start, wall_s=m["timing/all"], num_samples=samples,
        prompt_tokens=int(round(m.get("prompt_length/mean", 0.0) * samples)),
        response_tokens=int(round(m.get("response_length/mean", 0.0) * samples)),
        devices=n_devices, stage_s=stage_s, reward_mean=_reward(m),
        response_len_mean=m.get("response_length/mean", 0.0),
        response_len_max=int(m.get("response_length/max", 0)),
        loss=m.get("actor/pg_loss", 0.0),
        grad_norm=m.get("actor/grad_norm", m.get("grad_norm", 0.0)),
        kl=m.get("actor/kl_loss", 0.0), warmup=it - 1 < cfg.run.warmup_iterations,
        eval_accuracy=None,
        external={"iteration": it, "e2e_tps": m.get("e2e_tps"), "update_tps": m.get("update_tps"),
                  "max_lengths": {"prompt": m.get("prompt_length/max", 0.0),
                                  "response": m.get("response_length/max", 0.0)},
                  "vllm_tps": m.get("vllm_tps"),
                  "timing": {k: v for k, v in m.items() if k.startswith("timing/")}})


def _max_lengths_checked(iterations: list[dict]) -> list[str]:
    """e2e_tps against MindSpeed-RL's max-length formula (its log_max_throughput): (prompt max +
    response max) x samples / devices / iteration time; a disagreement is a warning as
    flag_tpspd's."""
    warnings = []
    for it in iterations:
        lengths = it["external"]["max_lengths"]
        at_max = (lengths["prompt"]
                  + lengths["response"]) * it["num_samples"] / it["devices"] / it["wall_s"]
        check = tpspd_check(at_max, it["external"].get("e2e_tps"))
        it["external"]["tpspd_check"] = {**check,
                                         "basis": "e2e_tps from maximum lengths "
                                                  "(log_max_throughput)"}
        if check["agree"] is False:
            warnings.append(f"iteration {it['iteration']}: e2e_tps {check['reported']:.4g} is not "
                            f"MindSpeed-RL's max-length throughput {at_max:.4g}: the device count "
                            f"or the lengths are not its")
    return warnings


def _log_text(text_or_path: str | Path) -> str:
    """A Path, or a one-line str naming an existing file, is read; any other str is the log
    itself."""
    if not isinstance(text_or_path, Path) and "\n" in text_or_path:
        return text_or_path
    try:
        p = Path(text_or_path)
        return p.read_text(errors="replace") if p.is_file() else ("" if isinstance(text_or_path,
                                                                                   Path)
                                                                  else text_or_path)
    except OSError:  # a one-line log too long to be a file name
        return str(text_or_path)


def parse_mindspeed_log(text_or_path: str | Path, cfg, n_devices: int, version: str | None = None,
                        log_max_throughput: bool = False) -> dict:
    """MindSpeed-RL training log (text, or a path to it) -> an rlbench cell results dict (cell
    "mindspeed-rl"). n_devices: all NPUs of the run (MindSpeed-RL's world_size). Values are logged
    with 4 decimals, so TPSPD agrees with e2e_tps to those decimals (1e-3 relative on the fixture's
    0.07 s iterations, far closer on real ones), not bit for bit.

    TPSPD is always the token counts' (mean lengths x samples). log_max_throughput: the run's
    rl_config.log_max_throughput, MindSpeed-RL's default True (rl_config.py:213), under which
    e2e_tps counts every sample at the batch's maximum prompt and response length: e2e_tps is then
    checked against that formula, and never read as TPSPD (run_mindspeed writes false)."""
    iterations, t = [], 0.0
    for line in _log_text(text_or_path).splitlines():
        parsed = parse_log_line(line)
        if parsed and "timing/all" in parsed[2]:
            iterations.append(_iteration(parsed[0], parsed[2], cfg, n_devices, t))
            t = iterations[-1]["end"]
    warnings = _max_lengths_checked(iterations) if log_max_throughput else flag_tpspd(iterations,
                                                                                      "e2e_tps")
    status = "complete" if len(iterations) >= cfg.run.iterations else "incomplete"
    return cell_results(cfg, cell="mindspeed-rl", framework="mindspeed-rl", version=version,
                        iterations=iterations, evals=[], status=status, warnings=warnings,
                        external={"devices": n_devices, "tpspd_reference": "e2e_tps",
                                  "eval": "MindSpeed-RL's GRPO trainer has no validation loop"})


def write_mindspeed_data(problems, out_dir: Path, tokenizer_path: str) -> tuple[Path, Path]:
    """Problems as JSON lines {problem, answer} and a YAML in the style of MindSpeed-RL's
    configs/datasets for cli/preprocess_data.py (deepscaler.yaml's handler and keys); returns (yaml,
    data prefix)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / "gsm8k.jsonl"
    raw.write_text("".join(json.dumps({"problem": p.question,
                                       "answer": p.answer}) + "\n" for p in problems))
    prefix = out_dir / "gsm8k"
    spec = {"input": str(raw), "tokenizer_name_or_path": tokenizer_path,
            "output_prefix": str(prefix),
            "handler_name": "R1AlpacaStyleInstructionHandler",
            "tokenizer_type": "HuggingFaceTokenizer",
            "workers": 4, "log_interval": 1000, "prompt_type": "qwen_r1",
            "map_keys": {"prompt": "problem", "query": "", "response": "answer", "system": ""},
            "dataset_additional_keys": ["labels"]}
    spec_path = out_dir / "rlbench_gsm8k.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec_path, prefix


def run_mindspeed(cfg, out_dir: str | Path, *, n_devices: int | None = None,
                  model_name: str | None = None,
                  load_dir: str | None = None, echo: bool = True) -> dict:
    """Preprocesses cfg's training data and runs MindSpeed-RL GRPO; writes out_dir/results.json.

    Needs MINDSPEED_RL_HOME (a checkout), torch_npu, model.kind=hf (tokenizer), and the model in
    Megatron format (load_dir or MINDSPEED_RL_LOAD) with its architecture name under MindSpeed-RL's
    configs/model/ (model_name or MINDSPEED_RL_MODEL, default qwen25_7b). n_devices: NPUs (default:
    all visible).
    """
    home = mindspeed_home()
    if home is None or importlib.util.find_spec("torch_npu") is None:
        raise not_installed(NOT_INSTALLED)
    if cfg.model.kind != "hf":
        raise UserError("--engine mindspeed-rl needs model.kind=hf with model.path the HF "
                        f"directory (its tokenizer), got model.kind={cfg.model.kind!r}")
    load_dir = load_dir or os.environ.get("MINDSPEED_RL_LOAD")
    if not load_dir:
        raise UserError("--engine mindspeed-rl needs the model's Megatron-format weights: set "
                        "MINDSPEED_RL_LOAD (convert with MindSpeed-LLM's checkpoint converter)")
    # inside: optional dependency (torch_npu)
    import torch_npu  # noqa: F401

    n_devices = n_devices or torch.npu.device_count()

    out = Path(out_dir).resolve()
    ds = load_dataset(cfg.data, cfg.run.seed)
    spec, prefix = write_mindspeed_data(ds.train, out / "data", cfg.model.path)
    if run_logged([sys.executable, str(home / "cli" / "preprocess_data.py"), spec.stem,
                   "--config-dir",
                   str(spec.parent)], out / "preprocess.log", cwd=home, echo=echo) != 0:
        raise UserError(f"MindSpeed-RL data preprocessing failed; see {out / 'preprocess.log'}")
    config = mindspeed_config(cfg, prefix, n_devices, model_name=model_name or os.environ.get(
        "MINDSPEED_RL_MODEL", "qwen25_7b"), load_dir=load_dir, save_dir=str(out / "ckpt"))
    argv = mindspeed_command(write_mindspeed_config(config, out / "rlbench_grpo.yaml"), home)
    return _launch(cfg, out, argv, home, n_devices, echo)


def checkout_version(home: Path) -> str | None:
    """MindSpeed-RL is not a package: its version is the checkout's commit (None if not a git
    tree)."""
    try:
        out = subprocess.run(["git", "-C", str(home), "rev-parse", "HEAD"], capture_output=True,
                             text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _launch(cfg, out: Path, argv: list[str], home: Path, n_devices: int, echo: bool) -> dict:
    """Runs the trainer, then parses its log; results.json whatever happened."""
    log_path = out / "mindspeed.log"
    return launch_and_record(argv, out, log_path, "MindSpeed-RL",
                             lambda: parse_mindspeed_log(log_path, cfg, n_devices,
                                                         version=checkout_version(home)),
                             cwd=home, echo=echo)
