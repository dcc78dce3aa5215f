"""The TRL ranks' files -> rlbench's result schema: the same IterationRecord, TPSPD and aggregates
as a cell.

Per iteration k (one generation and its optimizer steps):
  window   from the earliest rank's start to the latest rank's end (timing.py: after the step
           barrier,
           to on_step_end of the iteration's last step); evaluation is outside it;
  tokens   prompt + response tokens of the samples trained, no padding (TRL's prompt and completion
           masks), checked against TRL's own counter (num_tokens: prompt + completion tokens it has
           seen);
  TPSPD    tokens / (window * devices): metrics.record, the formula every rlbench cell uses;
  stages   the ranks' stage events summed per stage; idle per rank from the same events.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict

from rlbench.core.record.stages import TRAIN_STAGES, Stage
from rlbench.core.results import metrics
from rlbench.core.results.utilisation import stage_work
from rlbench.engines.external.trl.files import read_rank

TOKEN_TOLERANCE = 0  # tokens counted here and by TRL must agree exactly


def read(folder, world: int) -> dict:
    """Every rank's streams: events, windows, samples (all ranks); logs, evals, observed (rank 0's
    and each rank's observed)."""
    ranks = [read_rank(folder, r) for r in range(world)]
    return {"events": sorted((e for r in ranks for e in r["events"]), key=lambda e: e["start"]),
            "windows": [w for r in ranks for w in r["windows"]],
            "samples": [s for r in ranks for s in r["samples"]],
            "logs": ranks[0]["logs"], "evals": ranks[0]["evals"],
            "observed": [r["observed"] for r in ranks]}


def iterations(cfg, raw: dict, devices: int) -> list[dict]:
    """One IterationRecord dict per iteration every rank finished (its window on every rank)."""
    done = _finished(raw["windows"], devices)
    shape = (raw["observed"][0] or {}).get("shape")
    out = []
    for k in done:
        events = [e for e in raw["events"] if e["iteration"] == k and e["stage"]
                  != Stage.EVAL.value]
        samples = numbered([s for s in raw["samples"] if s["iteration"] == k])
        out.append(_record(cfg, k, done[k], events, samples, raw, devices, shape))
    return out


def _finished(windows: list[dict], devices: int) -> dict[int, tuple[float, float]]:
    """k -> (earliest start, latest end) for the iterations every rank closed."""
    by_k: dict[int, list[dict]] = {}
    for w in windows:
        by_k.setdefault(w["iteration"], []).append(w)
    return {k: (min(w["start"] for w in ws), max(w["end"] for w in ws))
            for k, ws in sorted(by_k.items()) if len(ws) == devices}


def numbered(samples: list[dict]) -> list[dict]:
    """Sample numbers 0..G-1 within each prompt across ranks (a group TRL split over two ranks was
    numbered on each), in rank order."""
    seen: dict[int, int] = {}
    out = []
    for s in samples:
        seen[s["prompt"]] = seen.get(s["prompt"], -1) + 1
        out.append({**s, "sample": seen[s["prompt"]]})
    return out


def _record(cfg, k: int, window: tuple[float, float], events: list[dict], samples: list[dict],
            raw: dict,
            devices: int, shape: dict | None) -> dict:
    start, end = window
    stage_s: dict[str, float] = {}
    for e in events:
        stage_s[e["stage"]] = stage_s.get(e["stage"], 0.0) + e["end"] - e["start"]
    spans = lambda stages: metrics.union_length([(e["start"],
                                                  e["end"]) for e in events if e["stage"]
                                                 in stages])
    lens = [s["response_len"] for s in samples]
    stale = [s["trained_version"] - s["behaviour_version"] for s in samples
             if s["trained_version"] is not None]
    logs = step_logs(raw["logs"], k, cfg.train.ppo_mini_batches)
    acc = next((e["accuracy"] for e in raw["evals"] if e["iteration"] == k + 1), None)
    rec = metrics.record(
        iteration=k, start=start, wall_s=end - start, num_samples=len(samples),
        prompt_tokens=sum(s["prompt_len"] for s in samples), response_tokens=sum(lens),
        devices=devices,
        rollout_s=spans({Stage.ROLLOUT.value}), train_s=spans(set(TRAIN_STAGES)),
        reward_mean=statistics.fmean(s["reward"] for s in samples) if samples else 0.0,
        response_len_mean=statistics.fmean(lens) if lens else 0.0,
        response_len_max=max(lens, default=0),
        staleness_max=max(stale, default=0),
        staleness_mean=statistics.fmean(stale) if stale else 0.0,
        loss=_mean(logs, "loss"), grad_norm=_mean(logs, "grad_norm"), kl=_mean(logs, "kl"),
        stage_s=stage_s,
        idle_frac=metrics.idle_fractions(events, start, end), rollout_occupancy=None,
        warmup=k < cfg.run.warmup_iterations, eval_accuracy=acc,
        work=stage_work(shape, samples, [], shared_prompt=False, tri_model=False,
                        kl=cfg.train.kl_coef > 0)
        if shape and samples else {})
    out = asdict(rec)
    out["external"] = {"trl_logs": logs,
                       "num_tokens": tokens_counted(raw["logs"], k, cfg.train.ppo_mini_batches)}
    return out


def step_logs(logs: list[dict], k: int, steps: int) -> list[dict]:
    """TRL's log dicts of iteration k's optimizer steps (global steps k*steps+1 .. (k+1)*steps)."""
    return [row for row in logs if k * steps < row["step"] <= (k + 1) * steps and "loss" in row]


def tokens_counted(logs: list[dict], k: int, steps: int) -> int | None:
    """The tokens TRL's own counter (num_tokens, cumulative) added in iteration k, or None."""
    def last(upto: int):
        rows = [row["num_tokens"] for row in logs if row["step"] <= upto and "num_tokens" in row]
        return rows[-1] if rows else None

    now_, before = last((k + 1) * steps), last(k * steps) if k else 0
    return int(now_ - before) if now_ is not None and before is not None else None


def _mean(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(statistics.fmean(vals)) if vals else 0.0


def token_warnings(iters: list[dict]) -> list[str]:
    """One warning per iteration where rlbench's token count and TRL's differ."""
    out = []
    for it in iters:
        trl = it["external"]["num_tokens"]
        it["external"]["tokens_agree"] = (None if trl is None else abs(trl - it["tokens"])
                                          <= TOKEN_TOLERANCE)
        if it["external"]["tokens_agree"] is False:
            out.append(f"iteration {it['iteration']}: {it['tokens']} tokens counted from TRL's "
                       f"masks, TRL's num_tokens says {trl}")
    return out
