"""One VERL step's metrics dict -> a LoggedStep, shared by the console, file (JSONL) and TensorBoard
readers.

The keys are VERL's (verl/trainer/ppo/metric_utils.py compute_timing_metrics and
compute_data_metrics, compute_throughout_metrics; the stage timers of its `marked_timer` inside
`step`), as rlbench's VERL adapter reads them (engines/external/verl/metrics.py):

    timing_s/step                 the step's seconds (required)
    timing_s/gen                  generation (required: the plan's rollout)
    timing_s/reward, old_log_prob, ref, values, adv, update_critic, update_actor
                                  training stages (their sum is the plan's training seconds)
    timing_s/update_weights (or sync_weights)   the colocated weight sync
    timing_s/save_checkpoint      checkpoints: inside `step`, taken out of it
    timing_s/testing              evaluation: taken out of the step only where the step holds it
                                  (VERL before
                                  0.5 timed validation inside `step`; 0.9.1's trainers time it after
                                  `step`: verl/trainer/ppo/ray_trainer.py:1730,
                                  v1/trainer_base.py:494)
    perf/total_num_tokens         prompt + response tokens of the batch (required)
    response_length/mean (required), response_length/max, prompt_length/mean
    perf/throughput               total tokens / (step x GPUs): gives the GPU count
"""
from __future__ import annotations

from pathlib import Path

from rlbench.core.costmodel.fromlog import LoggedStep
from rlbench.core.errors import UserError
from rlbench.plan.logs import NON_NEGATIVE, POSITIVE, checked, missing, where

REQUIRED = ("timing_s/step", "timing_s/gen", "perf/total_num_tokens", "response_length/mean")
TRAIN = ("timing_s/reward", "timing_s/old_log_prob", "timing_s/ref", "timing_s/values",
         "timing_s/adv",
         "timing_s/update_critic", "timing_s/update_actor")
WEIGHT_SYNC = ("timing_s/update_weights", "timing_s/sync_weights")
OUTSIDE = ("timing_s/testing", "timing_s/save_checkpoint")
OPTIONAL = ("response_length/max", "prompt_length/mean", "perf/throughput")


def is_training_step(data: dict) -> bool:
    """A training step's metrics (VERL's step 0 holds only the validation before training)."""
    return "timing_s/step" in data or "perf/total_num_tokens" in data


def rule(key: str) -> str:
    """What a key's value must be: the step, generation, the token count, lengths and the throughput
    > 0 (the plan divides by them or scales by them); the other stages' seconds >= 0."""
    return NON_NEGATIVE if key in (*TRAIN, *WEIGHT_SYNC, *OUTSIDE,
                                   "prompt_length/mean") else POSITIVE


def inside_testing(v: dict) -> float:
    """The evaluation seconds the step's time holds: all of timing_s/testing where the step is long
    enough to hold it besides its named stages (validation inside `step`, as VERL before 0.5 timed
    it), else none (after `step`, as VERL 0.9.1 times it)."""
    testing = v.get("timing_s/testing", 0.0)
    named = v["timing_s/gen"] + sum(v.get(k, 0.0) for k in (*TRAIN, *WEIGHT_SYNC,
                                                            "timing_s/save_checkpoint"))
    return testing if v["timing_s/step"] >= named + testing else 0.0


def logged_step(step: int, data: dict, path: Path, line: int | None) -> LoggedStep:
    """VERL metrics of one training step -> LoggedStep; a required key missing, or any value read
    that is not a finite number in its range (rule), is an error naming the file, the line, the step
    and the key."""
    for key in REQUIRED:
        if key not in data:
            raise missing(path, line, key, f"VERL step {step}", "needed: " + ", ".join(REQUIRED))
    v = {k: checked(data[k], path, line, k, rule(k), step)
         for k in (*REQUIRED, *TRAIN, *WEIGHT_SYNC, *OUTSIDE, *OPTIONAL) if k in data}
    wall = v["timing_s/step"] - v.get("timing_s/save_checkpoint", 0.0) - inside_testing(v)
    if wall <= 0:
        raise UserError(f"{where(path, line, step)}: step {step}'s 'timing_s/step' "
                        f"({v['timing_s/step']:g} s) is no longer than the checkpoint and "
                        f"evaluation it holds ({v['timing_s/step'] - wall:g} s), "
                        "which the plan takes out of it; allowed: a step longer than those")
    ws = next((v[k] for k in WEIGHT_SYNC if k in v), None)
    return LoggedStep(step=step, wall_s=wall, tokens=v["perf/total_num_tokens"],
                      response_mean=v["response_length/mean"], gen_s=v["timing_s/gen"],
                      train_s=sum(v.get(k, 0.0) for k in TRAIN), weight_sync_s=ws,
                      prompt_mean=v.get("prompt_length/mean"),
                      response_max=v.get("response_length/max"),
                      old_logprob_s=v.get("timing_s/old_log_prob"))


SKIPPED = ("with neither 'timing_s/step' nor 'perf/total_num_tokens' (not a training step: "
           "validation or other metrics only)")


def keys_read(rows: list[dict]) -> list[str]:
    """The keys of the plan's vocabulary that the log's steps hold."""
    seen = set().union(*(r.keys() for r in rows)) if rows else set()
    return [k for k in (*REQUIRED, *TRAIN, *WEIGHT_SYNC, *OUTSIDE, *OPTIONAL) if k in seen]


def gpus(rows: list[dict]) -> int | None:
    """The GPU count perf/throughput implies (total tokens / (step x throughput)), where logged."""
    for d in rows:
        if d.get("perf/throughput") and d.get("timing_s/step"):
            return max(1, round(float(d["perf/total_num_tokens"]) /
                                (float(d["timing_s/step"]) * float(d["perf/throughput"]))))
    return None
