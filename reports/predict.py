"""Predicted periodic-async speedup from a synchronous run's measured stage times (DESIGN.md §2).

Pure Python over result files (results.json iterations and samples.jsonl); no engine code.

The model, per measured iteration of the sync run (n = devices of the sync run; times in seconds):

1. Measured sync stage times: T_roll (rollout), T_train (reward + old/ref log-probs + advantage +
   update), T_opt (optimizer step), T_ws (weight sync), T_other (wall time not covered by a stage).
2. Device split, rollout pool r devices, training pool t devices:
       T_roll'  = T_roll * (n / r) ** a    a = rollout_exponent; a = 1: rollout throughput grows
                                           linearly with devices (ideal); a = 0: not at all
                                           (latency-bound decode, e.g. the long tail)
       T_train' = T_train * n / t,  T_opt' = T_opt * n / t    (training scales linearly)
       T_ws, T_other unchanged.
3. When each group finishes: the iteration's response lengths are replayed through continuous
   batching (max_num_seqs slots, dispatch order). A decode step advances every in-flight sequence
   by one token and every step costs the same (decode time proportional to a sequence's tokens;
   prefill ignored), so a sample finishes after response_len steps and a group when its longest
   sample does. Group g arrives at T_roll' * step_g / total_steps.
4. The trainer takes groups in arrival order; group g costs T_train' * tokens_g / tokens
   (prompt + response tokens). finish = max(finish, arrival_g) + cost_g.
5. T_async = T_ws + finish_of_last_group + T_opt' + T_other. It is never below
   max(T_roll', T_train'), and is about T_roll' + (training of the last group) when the trainer
   keeps up with the arrivals. Contention between the pools is ignored.
6. Predicted TPSPD = tokens / (T_async * D), D = devices of the async run (default r + t, as TPSPD
   always divides by every device of the run); predicted speedup = median predicted TPSPD / median
   measured sync TPSPD, the same ratio as the measured speedup.

Consequence: with a = 1 and r + t = n the prediction never exceeds 1 (under linear scaling the
colocated sync loop wastes nothing). Asynchrony pays where rollout does not scale with devices
(a < 1: the tail of long responses keeps few sequences in flight) and through the overlap of
training with the tail; the report therefore shows a = 1 and a = 0 side by side.
"""
from __future__ import annotations

import statistics
from collections import defaultdict, deque

from rlbench.errors import UserError
from rlbench.stages import Stage

TRAIN_STAGES = (Stage.REWARD.value, Stage.OLD_LOGPROB.value, Stage.REF_LOGPROB.value,
                Stage.ADVANTAGE.value, Stage.UPDATE.value)

MODEL = ("T_async = T_ws + (trainer finishes the last group) + T_opt*n/t + T_other; rollout "
         "T_roll*(n/r)^a, training T_train*n/t; groups arrive when their longest response is done "
         "(continuous batching replay of the measured lengths, every decode step costs the same) "
         "and are trained in arrival order; speedup = predicted TPSPD / measured sync TPSPD, "
         "TPSPD dividing by r+t devices")


def group_finish_steps(samples: list[dict], slots: int | None = None) -> dict[int, int]:
    """prompt index -> decode step at which the group's last sample finishes.

    samples: one iteration's rows (prompt, sample, response_len). slots: sequences in flight
    (max_num_seqs); None = all at once. Sequences start in dispatch order (prompt, sample) and a
    finished sequence's slot is refilled at once.
    """
    order = sorted(samples, key=lambda s: (s["prompt"], s["sample"]))
    pending = deque((s["prompt"], max(1, int(s["response_len"]))) for s in order)
    slots = max(1, slots or len(order))
    active: list[list[int]] = []  # [remaining tokens, prompt]
    step, done = 0, {}
    while pending or active:
        while pending and len(active) < slots:
            prompt, length = pending.popleft()
            active.append([length, prompt])
        delta = min(a[0] for a in active)  # jump to the next finishing sequence
        step += delta
        for a in active:
            a[0] -= delta
            if a[0] == 0:
                done[a[1]] = max(done.get(a[1], 0), step)
        active = [a for a in active if a[0] > 0]
    return done


def arrivals(samples: list[dict], slots: int | None = None) -> list[tuple[float, int]]:
    """[(arrival as a fraction of the rollout time, tokens of the group)], in arrival order.

    Without samples the whole batch is one group arriving at the end (nothing to overlap).
    """
    if not samples:
        return [(1.0, 1)]
    steps = group_finish_steps(samples, slots)
    total = max(steps.values())
    tokens: dict[int, int] = defaultdict(int)
    for s in samples:
        tokens[s["prompt"]] += int(s["prompt_len"]) + int(s["response_len"])
    return sorted((steps[p] / total, tokens[p]) for p in steps)


def consume(groups: list[tuple[float, int]], t_roll: float, t_train: float) -> float:
    """Seconds from rollout start until the trainer has finished the last group.

    groups: (arrival fraction, tokens) in arrival order; t_roll, t_train: seconds on the split pools.
    """
    total = sum(tok for _, tok in groups) or 1
    finish = 0.0
    for frac, tok in groups:
        finish = max(finish, frac * t_roll) + t_train * tok / total
    return finish


def stage_times(it: dict) -> dict[str, float]:
    """An IterationRecord dict -> seconds of roll, train, opt, ws, other."""
    st = it.get("stage_s") or {}
    out = {"roll": st.get(Stage.ROLLOUT.value, 0.0),
           "train": sum(st.get(s, 0.0) for s in TRAIN_STAGES),
           "opt": st.get(Stage.OPTIMIZER_STEP.value, 0.0),
           "ws": st.get(Stage.WEIGHT_SYNC.value, 0.0)}
    out["other"] = max(0.0, it["wall_s"] - sum(out.values()))
    return out


def predict_iteration(it: dict, samples: list[dict], n: int, r: int, t: int, a: float,
                      slots: int | None) -> float:
    """Predicted periodic-async wall time (s) of one sync iteration on r + t devices."""
    st = stage_times(it)
    t_roll = st["roll"] * (n / r) ** a
    t_train = st["train"] * n / t
    return st["ws"] + consume(arrivals(samples, slots), t_roll, t_train) + st["opt"] * n / t + st["other"]


def predict_async(sync_cell: dict, samples: list[dict], rollout_devices: int, train_devices: int,
                  rollout_exponent: float = 1.0, devices: int | None = None) -> dict:
    """Predict periodic-async TPSPD speedup over a measured sync cell (model: module docstring).

    sync_cell: the sync cell's results.json dict; samples: its samples.jsonl rows.
    rollout_devices, train_devices: the split (r, t); devices: TPSPD divisor of the async run
    (default r + t). Returns predicted_speedup (TPSPD ratio), predicted_iter_s and sync_iter_s
    (median seconds per iteration), model (text) and the inputs used.
    """
    its = [it for it in sync_cell.get("iterations") or [] if not it.get("warmup")] \
        or sync_cell.get("iterations") or []
    if not its:
        raise UserError(f"cell {sync_cell.get('cell')!r}: no iterations to predict from")
    if rollout_devices < 1 or train_devices < 1:
        raise UserError(f"rollout_devices={rollout_devices}, train_devices={train_devices}: need >= 1")
    n = int(its[0].get("devices") or rollout_devices + train_devices)
    d = devices or rollout_devices + train_devices
    slots = ((sync_cell.get("config") or {}).get("rollout") or {}).get("max_num_seqs")
    by_iter: dict[int, list[dict]] = defaultdict(list)
    for s in samples:
        by_iter[s["iteration"]].append(s)
    pred_s = [predict_iteration(it, by_iter.get(it["iteration"], []), n, rollout_devices,
                                train_devices, rollout_exponent, slots) for it in its]
    pred_tpspd = [it["tokens"] / (p * d) if p > 0 else 0.0 for it, p in zip(its, pred_s)]
    sync_tpspd = statistics.median(it["tpspd"] for it in its)
    return {"predicted_speedup": statistics.median(pred_tpspd) / sync_tpspd if sync_tpspd else None,
            "predicted_iter_s": statistics.median(pred_s),
            "sync_iter_s": statistics.median(it["wall_s"] for it in its),
            "model": MODEL, "rollout_exponent": rollout_exponent, "sync_devices": n,
            "rollout_devices": rollout_devices, "train_devices": train_devices, "devices": d,
            "iterations": [it["iteration"] for it in its]}
