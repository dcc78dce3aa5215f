"""Produce the VERL test fixtures with VERL's own code, on CPU (run with .venv-verl/bin/python).

    bash scripts/setup_verl.sh
    .venv-verl/bin/python scripts/make_verl_fixture.py tests/fixtures/external

Writes, in OUT_DIR:
  verl_metrics.jsonl  - a short GRPO run's metrics as VERL's trainer logs them: every value is computed
                        by VERL's functions (compute_data_metrics, compute_timing_metrics,
                        compute_throughout_metrics, compute_variance_proxy_metrics, the GRPO advantage,
                        the vanilla PPO policy loss, the low_var_kl penalty, the v1 trainer's
                        _val_metrics_update) on a synthetic batch, timed by VERL's marked_timer, and
                        written by VERL's Tracking "file" backend (FileLogger) to VERL_FILE_LOGGER_PATH.
                        Only the model is missing: token ids, log-probs and response texts are made up.
  verl_gsm8k_scores.json - tricky GSM8K responses with VERL's verl.utils.reward_score.gsm8k results.
  verl_fixture_meta.json - VERL/torch versions and the run shape (for the tests).
Nothing here imports rlbench: this runs in VERL's venv, the tests run in rlbench's.
"""
from __future__ import annotations

import importlib.metadata as md
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.metric_utils import (compute_data_metrics, compute_throughout_metrics,
                                           compute_timing_metrics, compute_variance_proxy_metrics)
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict
from verl.utils.reward_score import default_compute_score, gsm8k
from verl.utils.tracking import Tracking

# Run shape (mirrored by the tests' RunConfig): 4 prompts x G=2, 2 GPUs, 4 steps, validate every 2.
PROMPTS, GROUP, N_GPUS, STEPS, TEST_FREQ = 4, 2, 2, 4, 2
MAX_PROMPT, MAX_RESPONSE = 48, 40
SOURCE = "openai/gsm8k"
TRICKY = [  # (response, ground truth): the corners of VERL's strict rule
    ("5+3=8\n#### 8", "8"), ("#### 8", "8"), ("####8", "8"), ("####  8", "8"), ("##### 8", "8"),
    ("#### 8.", "8"), ("#### 1,234", "1234"), ("#### $72", "72"), ("#### -5", "-5"), ("#### -5", "5"),
    ("#### 3\n#### 4", "4"), ("#### 3\n#### 4", "3"), ("#### 72.0", "72"), ("#### 072", "72"),
    ("The answer is 8.", "8"), ("", "8"), ("#### 8 apples", "8"), ("#### 1,2,3", "123"),
    ("#### 8" + " filler" * 60, "8"), ("#### 8" + "x" * 296, "8"), ("#### 8" + "x" * 294, "8"),
    ("#### .5", ".5"), ("#### 5\n", "5"), ("####\t8", "8"), ("#### 1e3", "1000"),
    ("# 8\n## 8\n### 8", "8"), ("answer: #### 12,000,000", "12000000"), ("#### --5", "-5"),
]


def tricky_scores() -> list[dict]:
    """VERL's extract_solution (strict, flexible) and compute_score on the tricky strings."""
    rows = []
    for text, truth in TRICKY:
        rows.append({"response": text, "ground_truth": truth,
                     "verl_strict": gsm8k.extract_solution(text, method="strict"),
                     "verl_flexible": gsm8k.extract_solution(text, method="flexible"),
                     "verl_score": float(gsm8k.compute_score(text, truth)),
                     "verl_default_compute_score": float(default_compute_score(SOURCE, text, truth))})
    return rows


def synthetic_batch(rng: np.random.Generator, step: int) -> tuple[DataProto, dict]:
    """A left-padded prompt / right-padded response batch like VERL's, with rule-reward scores."""
    b = PROMPTS * GROUP
    p_len = np.repeat(rng.integers(20, MAX_PROMPT + 1, PROMPTS), GROUP)  # a prompt repeats per sample
    r_len = rng.integers(4, MAX_RESPONSE + 1, b)
    r_len[rng.integers(0, b)] = MAX_RESPONSE  # one clipped response: the long tail
    prompt_mask = torch.tensor([[0] * (MAX_PROMPT - p) + [1] * p for p in p_len])
    resp_mask = torch.tensor([[1] * r + [0] * (MAX_RESPONSE - r) for r in r_len])
    truths = [str(rng.integers(1, 500)) for _ in range(PROMPTS)]
    texts = [f"{t} #### {t}" if rng.random() < 0.3 + 0.1 * step else "#### 0"
             for t in np.repeat(truths, GROUP)]
    scores = torch.tensor([gsm8k.compute_score(s, t) for s, t in zip(texts, np.repeat(truths, GROUP))],
                          dtype=torch.float32)
    token_scores = torch.zeros(b, MAX_RESPONSE)
    token_scores[torch.arange(b), torch.tensor(r_len) - 1] = scores  # reward on the last token
    uid = np.repeat(np.array([f"s{step}p{i}" for i in range(PROMPTS)], dtype=object), GROUP)
    adv, ret = core_algos.compute_grpo_outcome_advantage(token_scores, resp_mask.float(), uid)
    batch = DataProto.from_dict(
        tensors={"prompts": torch.zeros(b, MAX_PROMPT, dtype=torch.long),
                 "responses": torch.zeros(b, MAX_RESPONSE, dtype=torch.long),
                 "attention_mask": torch.cat([prompt_mask, resp_mask], dim=1),
                 "response_mask": resp_mask.float(), "token_level_scores": token_scores,
                 "token_level_rewards": token_scores, "advantages": adv, "returns": ret,
                 "prompt_length": torch.tensor(p_len, dtype=torch.float32),  # as the v1 trainer adds
                 "response_length": torch.tensor(r_len, dtype=torch.float32)},
        meta_info={"global_token_num": (p_len + r_len).tolist()})  # v1: prompt + response lengths
    return batch, {"adv": adv, "mask": resp_mask.float()}


def actor_metrics(rng: np.random.Generator, adv: torch.Tensor, mask: torch.Tensor) -> dict:
    """Actor update metrics named as the v1 trainer names them (rename_dict 'actor/' + reduce)."""
    old = torch.tensor(rng.normal(-1.0, 0.3, adv.shape), dtype=torch.float32)
    new = old + torch.tensor(rng.normal(0.0, 0.05, adv.shape), dtype=torch.float32)
    ref = old + torch.tensor(rng.normal(0.0, 0.02, adv.shape), dtype=torch.float32)
    loss_cfg = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
                                 "clip_ratio_c": 3.0, "global_batch_info": {}})
    pg_loss, pg_metrics = core_algos.compute_policy_loss_vanilla(old, new, adv, mask, "token-mean", loss_cfg)
    kl = core_algos.agg_loss(core_algos.kl_penalty(new, ref, "low_var_kl"), mask, "token-mean")
    raw = {"pg_loss": [pg_loss.item()], "kl_loss": [kl.item()], "kl_coef": [0.001],
           "grad_norm": [float(rng.uniform(0.1, 1.0))], "lr": [1e-6],
           **{k.removeprefix("actor/"): [v] for k, v in pg_metrics.items()}}
    return reduce_metrics(rename_dict(raw, "actor/"))


def validation(rng: np.random.Generator, step: int) -> dict:
    """Greedy pass@1 on 6 held-out problems, reduced by the v1 trainer's own _val_metrics_update."""
    truths = [str(v) for v in rng.integers(1, 500, 6)]
    outs = [f"#### {t}" if rng.random() < 0.3 + 0.1 * step else "no answer" for t in truths]
    scores = [float(default_compute_score(SOURCE, o, t)) for o, t in zip(outs, truths)]
    return PPOTrainer._val_metrics_update(None, np.array([SOURCE] * len(scores), dtype=object),
                                          [f"v{i}" for i in range(len(scores))], {"reward": scores}, [])


def train_step(rng: np.random.Generator, step: int) -> dict:
    """One step's metrics dict, assembled as verl/trainer/ppo/v1 trainer_base.fit + _compute_metrics."""
    timing_raw: dict[str, float] = {}
    with marked_timer("step", timing_raw):  # stages sleep a few ms: the timings are real, the work is not
        with marked_timer("gen", timing_raw):
            time.sleep(0.030 + 0.005 * step)
            batch, aux = synthetic_batch(rng, step)
        for name, secs in (("old_log_prob", 0.006), ("ref", 0.005), ("adv", 0.001), ("update_actor", 0.012)):
            with marked_timer(name, timing_raw):
                time.sleep(secs)
        with marked_timer("update_weights", timing_raw):
            time.sleep(0.004)
    metrics = {**actor_metrics(rng, aux["adv"], aux["mask"]), "actor/entropy": float(rng.uniform(0.5, 1.5))}
    if step == STEPS or step % TEST_FREQ == 0:
        with marked_timer("testing", timing_raw):
            metrics.update(validation(rng, step))
    metrics.update({"training/global_step": step, "training/epoch": 0})
    metrics.update(compute_data_metrics(batch=batch, use_critic=False))
    metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
    metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=N_GPUS))
    metrics.update(compute_variance_proxy_metrics(batch=batch, gradient_norm=metrics["actor/grad_norm"]))
    return metrics


def write_run(path: Path, seed: int = 0) -> None:
    """Validation at step 0, then STEPS training steps, logged through Tracking's file backend."""
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    rng = np.random.default_rng(seed)
    tracking = Tracking(project_name="rlbench", experiment_name="fixture", default_backend=["file"])
    tracking.log(data=validation(rng, 0), step=0)
    for step in range(1, STEPS + 1):
        tracking.log(data=train_step(rng, step), step=step)
    tracking.logger["file"].finish()


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_run(out / "verl_metrics.jsonl")
    (out / "verl_gsm8k_scores.json").write_text(json.dumps(tricky_scores(), indent=1) + "\n")
    meta = {"verl": md.version("verl"), "torch": md.version("torch"), "prompts": PROMPTS, "group": GROUP,
            "n_gpus": N_GPUS, "steps": STEPS, "test_freq": TEST_FREQ, "script": "scripts/make_verl_fixture.py"}
    (out / "verl_fixture_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/external")
