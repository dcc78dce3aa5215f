"""Synthetic synchronous-run logs in each format `rlbench plan` reads, written from the formats' documented
keys (bench/plan/verl_metrics.py, bench/plan/trl_state.py): a VERL-style GRPO run on `gpus` GPUs whose
stage seconds follow a fixed recipe with a seeded step-to-step spread. Also a malformed file per format."""
from __future__ import annotations

import json
import random
from pathlib import Path


def verl_steps(n: int = 20, gpus: int = 8, seed: int = 0, prompts: int = 256, g: int = 8) -> list[dict]:
    """n training steps of VERL metrics (step 1..n), a step-0 validation row first."""
    rng = random.Random(seed)
    rows = [{"val-core/openai/gsm8k/reward/mean@1": 0.31}]
    for k in range(1, n + 1):
        resp, longest = rng.uniform(380, 420), rng.choice([2048, 1900, 1700])
        prompt = rng.uniform(140, 160)
        tokens = prompts * g * (prompt + resp)
        t = {"gen": 40.0 * rng.uniform(0.95, 1.05), "reward": 0.8, "old_log_prob": 6.0 * rng.uniform(0.95, 1.05),
             "ref": 5.5, "adv": 0.3, "update_actor": 18.0 * rng.uniform(0.95, 1.05), "update_weights": 2.0}
        step = sum(t.values()) + 1.0
        row = {f"timing_s/{k2}": v for k2, v in t.items()}
        row.update({"timing_s/step": step, "perf/total_num_tokens": tokens, "perf/throughput": tokens / (step * gpus),
                    "response_length/mean": resp, "response_length/max": longest, "prompt_length/mean": prompt,
                    "critic/score/mean": 0.3 + 0.01 * k, "actor/pg_loss": -0.01})
        rows.append(row)
    return rows


def write_verl_jsonl(path: Path, rows: list[dict]) -> Path:
    """VERL's file logger: {"step": N, "data": {...}} per line."""
    path.write_text("".join(json.dumps({"step": i, "data": d}) + "\n" for i, d in enumerate(rows)))
    return path


def write_verl_console(path: Path, rows: list[dict]) -> Path:
    """VERL's console logger: `step:N - key:value - ...` among other output, as Ray prefixes it."""
    lines = ["(TaskRunner pid=4242) Training Progress: 0%|          | 0/20"]
    for i, d in enumerate(rows):
        body = " - ".join(f"{k}:np.float64({v!r})" if k.startswith("timing_s/gen") else f"{k}:{v!r}"
                          for k, v in d.items())
        lines.append(f"(TaskRunner pid=4242) step:{i} - {body}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_tensorboard(folder: Path, rows: list[dict]) -> Path:
    """VERL's TensorBoard logger: one scalar per metric and step."""
    from torch.utils.tensorboard import SummaryWriter  # inside: torch, only where a test writes event files

    folder.mkdir(parents=True, exist_ok=True)
    w = SummaryWriter(str(folder))
    for i, d in enumerate(rows):
        for k, v in d.items():
            w.add_scalar(k, v, i)
    w.close()
    return folder


def write_trl_state(path: Path, n: int = 20, seed: int = 0, per_device: int = 16, logging_steps: int = 1) -> Path:
    """TRL's trainer_state.json with GRPOTrainer's log history (step_time, cumulative num_tokens,
    completions/*), an eval entry and the closing summary entry."""
    rng = random.Random(seed)
    hist, seen = [], 0
    for s in range(logging_steps, n * logging_steps + 1, logging_steps):
        mean = rng.uniform(180, 220)
        seen += logging_steps * per_device * 2 * (60 + mean)
        hist.append({"step": s, "epoch": s / 100, "loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-6,
                     "num_tokens": seen, "completions/mean_length": mean, "completions/min_length": 20,
                     "completions/max_length": 512, "completions/clipped_ratio": 0.02, "reward": 0.4,
                     "step_time": 12.0 * rng.uniform(0.95, 1.05)})
    hist.append({"step": n * logging_steps, "eval_loss": 0.02, "eval_runtime": 3.0})
    hist.append({"step": n * logging_steps, "train_runtime": 250.0, "train_loss": 0.01, "total_flos": 0})
    doc = {"best_metric": None, "epoch": 1.0, "global_step": n * logging_steps, "log_history": hist,
           "logging_steps": logging_steps, "max_steps": n * logging_steps, "train_batch_size": per_device}
    path.write_text(json.dumps(doc, indent=2))
    return path
