"""VERL's file logger (JSONL) -> rlbench's result schema.

What VERL logs that this relies on (read in verl 0.9.1; see tests/fixtures/external/README.md):
  - the trainer logs one dict per step through `verl.utils.tracking.Tracking`; the "file" backend
    (`FileLogger`) appends `{"step": N, "data": {...}}` lines to the path in the environment
    variable VERL_FILE_LOGGER_PATH. Step 0 holds the validation before training, step k >= 1 the
    k-th training step (and validation when it ran);
  - `perf/throughput = perf/total_num_tokens / (timing_s/step * n_gpus)`, total tokens = non-padding
    prompt + response tokens of the step's batch, n_gpus = all GPUs of the resource pools
    (`verl/trainer/ppo/metric_utils.py`): the same formula as rlbench's TPSPD;
  - stage timers (`marked_timer`): gen, reward, old_log_prob, ref, adv, update_actor, update_weights
    inside `step`; `testing` (validation) runs outside `step`, so neither TPSPD counts evaluation.
"""
from __future__ import annotations

from pathlib import Path

from rlbench.core.record.stages import Stage
from rlbench.core.results.schema import read_jsonl
from rlbench.engines.external.common import cell_results, flag_tpspd, make_iteration
from rlbench.engines.external.verl.data import DATA_SOURCE
from rlbench.engines.external.verl.names import is_training_step

FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"
# VERL timer name (logged as timing_s/<name>) -> rlbench stage. Not mapped (kept raw under
# `external.timing_s`): step (the iteration), testing (evaluation, outside step), save_checkpoint,
# values/update_critic (no critic in GRPO), start_profile/stop_profile.
STAGE_MAP = {"gen": Stage.ROLLOUT, "reward": Stage.REWARD, "old_log_prob": Stage.OLD_LOGPROB,
             "ref": Stage.REF_LOGPROB, "adv": Stage.ADVANTAGE, "update_actor": Stage.UPDATE,
             "update_weights": Stage.WEIGHT_SYNC}


ROLLOUT_GAP = ("rollout_corr/log_ppl_abs_diff", "training/rollout_probs_diff_mean",
               "training/rollout_probs_diff_max")


def read_verl_jsonl(path: str | Path) -> list[tuple[int, dict]]:
    """(step, metrics) per line of a VERL FileLogger file; a line cut short by a crash ends it."""
    return [(int(row["step"]), row["data"]) for row in read_jsonl(Path(path)) if "data" in row]


def eval_accuracy(data: dict, data_source: str = DATA_SOURCE) -> tuple[str, float] | None:
    """(key, value) of VERL's core validation metric for `data_source`, e.g.
    val-core/openai/gsm8k/reward/mean@1 (greedy pass@1 with the rule reward), or None."""
    keys = sorted(k for k in data if k.startswith(f"val-core/{data_source}/") and "/mean@" in k)
    return (keys[0], float(data[keys[0]])) if keys else None


STALE = "fully_async/count/stale_trajectory_processed"  # the fully-async recipe's running count


def staleness(data: dict, before: dict | None, recipe: str | None) -> tuple[int, float]:
    """(max, mean) weight versions a step's samples lag its update: VERL's own per-trajectory record
    where it logs one (its v1 trainer); the one-step-off recipe trains every batch one step late
    (its first is the initial weights'); the fully-async recipe counts the stale samples it trained,
    one version late each."""
    if "training/off_policy/trajectory_staleness/max" in data:
        return (int(data["training/off_policy/trajectory_staleness/max"]),
                float(data.get("training/off_policy/trajectory_staleness/mean", 0.0)))
    if recipe == "one_step_off":
        return (0, 0.0) if before is None else (1, 1.0)
    if STALE in data:
        stale = data[STALE] - ((before or {}).get(STALE) or 0.0)
        return (1 if stale > 0 else 0), stale / max(1, round(data["perf/total_num_tokens"] /
                                                           (data["prompt_length/mean"]
                                                            + data["response_length/mean"])))
    return 0, 0.0


def _iteration(k: int, step: int, data: dict, cfg, n_gpus: int, start: float,
               stale: tuple[int, float] = (0, 0.0), stage_devices=None) -> dict:
    """Iteration k's record from VERL's metrics of its training step logged as `step` (its sync
    trainer logs step k+1; the fully-async recipe logs the weight version)."""
    wall = float(data.get("perf/time_per_step", data["timing_s/step"]))
    tokens = int(round(data["perf/total_num_tokens"]))
    p_mean, r_mean = data.get("prompt_length/mean"), data.get("response_length/mean")
    samples = round(tokens / (p_mean + r_mean)) if p_mean is not None and r_mean else cfg.batch_size
    prompt_tokens = int(round(p_mean * samples)) if p_mean is not None else 0
    timing = {k.removeprefix("timing_s/"): float(v) for k, v in data.items()
              if k.startswith("timing_s/")}
    # device-seconds, as rlbench's stage_s sums its workers': a VERL stage's wall seconds x the
    # devices it holds
    per = stage_devices or (lambda stage: n_gpus)
    stage_s = {STAGE_MAP[k].value: v * per(STAGE_MAP[k]) for k, v in timing.items()
               if k in STAGE_MAP}
    acc = eval_accuracy(data)
    return make_iteration(
        iteration=k, start=start, wall_s=wall, num_samples=samples, prompt_tokens=prompt_tokens,
        response_tokens=tokens - prompt_tokens, devices=n_gpus, stage_s=stage_s,
        reward_mean=float(data.get("critic/score/mean", 0.0)),
        response_len_mean=float(r_mean or 0.0),
        response_len_max=int(data.get("response_length/max", 0)),
        loss=float(data.get("actor/pg_loss", data.get("actor/loss", 0.0))),
        grad_norm=float(data.get("actor/grad_norm", 0.0)), kl=float(data.get("actor/kl_loss", 0.0)),
        warmup=k < cfg.run.warmup_iterations, eval_accuracy=acc[1] if acc else None,
        staleness_max=stale[0], staleness_mean=stale[1],
        external={"step": step, "perf/throughput": data.get("perf/throughput"),
                  # vLLM's log-probs of the sampled tokens against the trainer's (old-policy pass):
                  # near zero only while vLLM samples from the weights the trainer has
                  "rollout_vs_trainer": {k.split("/", 1)[1]: data[k]
                                         for k in ROLLOUT_GAP if k in data},
                  # the batch's advantages: all zero (every group's rewards equal) gives no
                  # policy gradient, so a step may rightly have a zero gradient norm
                  "advantages": {k: data.get(f"critic/advantages/{k}") for k in ("min", "max")},
                  "perf/total_num_tokens": data["perf/total_num_tokens"], "timing_s": timing,
                  "expected_samples": cfg.batch_size})


def parse_verl_jsonl(path: str | Path, cfg, n_gpus: int, version: str | None = None,
                     cell: str = "verl",
                     schedule: str | None = None, verl_gpus: int | None = None,
                     recipe: str | None = None,
                     stage_devices=None) -> dict:
    """A VERL FileLogger JSONL -> an rlbench cell results dict.

    n_gpus: all GPUs of the run (VERL's resource pools), the TPSPD divisor. verl_gpus: the GPUs
    VERL's own perf/throughput divides by, where it counts fewer (its one-step-off recipe: the
    trainer's pool only). Iteration k is the k-th training step logged; evals[i]["iteration"] is the
    steps trained before it, VERL's own step number of a validation (0 = before training), as
    rlbench counts them. recipe (recipes.VerlOptions): how the samples' staleness is read.
    stage_devices(stage) -> the devices a stage holds (default: all n_gpus, VERL's hybrid engine):
    its seconds count that many times, as rlbench sums its workers' stage seconds.
    """
    iterations, evals, t, before = [], [], 0.0, None
    for step, data in read_verl_jsonl(path):
        # a recipe may train one more
        if is_training_step(data) and len(iterations) < cfg.run.iterations:
            it = _iteration(len(iterations), step, data, cfg, n_gpus, t,
                            staleness(data, before, recipe),
                            stage_devices)
            iterations.append(it)
            t, before = it["end"] + float(data.get("timing_s/testing", 0.0)), data
        acc = eval_accuracy(data)
        if acc:
            evals.append({"iteration": min(step, cfg.run.iterations), "accuracy": acc[1],
                          "key": acc[0]})
    warnings = flag_tpspd(iterations, "perf/throughput", verl_gpus)
    if iterations and iterations[-1]["num_samples"] != cfg.batch_size:
        warnings.append(f"VERL trained {iterations[-1]['num_samples']} samples per step, the "
                        f"config asks for {cfg.batch_size} (prompts_per_iteration x group_size)")
    status = "complete" if len(iterations) >= cfg.run.iterations else "incomplete"
    return cell_results(cfg, cell=cell, framework="verl", version=version, iterations=iterations,
                        evals=evals, status=status, warnings=warnings, schedule=schedule,
                        external={"metrics_file": str(path), "devices": n_gpus,
                                  "tpspd_reference": "perf/throughput",
                                  "verl_throughput_gpus": verl_gpus or n_gpus})
