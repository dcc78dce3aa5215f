"""Every setting that changes what a VERL iteration costs, beside rlbench's, read from the config
VERL resolved.

The probe inside VERL writes the config its trainer (or recipe) resolved (probe.py:
verl_config.json), so a setting moved anywhere, by rlbench's translation or by a VERL default, shows
here. Each row is VERL's value, rlbench's, and whether they are equal; where they differ the row
must name a difference of DIFFERENCES (a reason the two cannot be equal), or the cell records a
warning, and tests/unit/engines/test_verl_cost_settings.py fails on it. A resolved config that was
not written fails one row (nothing could be checked).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rlbench.engines.external.trl.cost_settings import rlbench_compiles

A, ACTOR, REF, ROLLOUT = ("actor_rollout_ref", "actor_rollout_ref.actor", "actor_rollout_ref.ref",
                          "actor_rollout_ref.rollout")
PADDING = "padding in training"
GENERATION = "generation"
# what stays different, and why (every VERL cell's results.json, external.differences; the report's
# table)
DIFFERENCES = (
    {"setting": PADDING, "rlbench": "a micro-batch's rows padded to its group's longest response",
     "peer": "every prompt padded to data.max_prompt_length (the workload's longest prompt) and "
             "every response to the response cap, in every training pass",
     "why": "VERL's padding removal (use_remove_padding) needs flash-attn's varlen kernels, which "
            "have no CPU build; padding carries no loss, so the same loss, another cost"},
    {"setting": GENERATION, "rlbench": "its built-in sampler (continuous batching)",
     "peer": "vLLM's CPU build as a server (its scheduler and prefix caching)",
     "why": "each engine's own generation: the same distribution, not the same samples"},
)


# what rlbench lays over VERL where VERL has no config key for it (probe.py), and why
OVERRIDDEN = (
    {"setting": "replay buffer poll",
     "verl": "every 2.0 s (verl/trainer/ppo/v1/replay_buffer.py:144)",
     "set to": "every 0.05 s",
     "why": "VERL's v1 trainer waits for an iteration's samples in whole polls: a 2.5 s rollout on "
            "CPU counts 4 s; rlbench's trainer wakes on each finished group. A setting of VERL's "
            "code, not of its work"},
)


def get(config: dict, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


@dataclass(frozen=True)
class CostSetting:
    name: str
    verl: Callable[[dict], Any]  # VERL's resolved config -> its value
    rlbench: Callable[[Any], Any]  # the RunConfig -> rlbench's value
    # the difference that explains it where the two differ (None: must be equal)
    listed_as: str | None = None


def _any(*keys: str) -> Callable[[dict], bool]:
    return lambda c: any(bool(get(c, k)) for k in keys)


COST_SETTINGS: tuple[CostSetting, ...] = (
    CostSetting("activation (gradient) checkpointing",
                _any(f"{A}.model.enable_gradient_checkpointing"),
                lambda cfg: False),
    CostSetting("torch.compile",
                _any(f"{ACTOR}.use_torch_compile", f"{ACTOR}.fsdp_config.use_torch_compile",
                                      f"{REF}.fsdp_config.use_torch_compile"), rlbench_compiles),
    CostSetting("training dtype", lambda c: get(c, f"{ACTOR}.fsdp_config.dtype"),
                lambda cfg: cfg.model.dtype),
    CostSetting("rollout dtype", lambda c: get(c, f"{ROLLOUT}.dtype"), lambda cfg: cfg.model.dtype),
    CostSetting("attention kernel",
                lambda c: get(c, f"{A}.model.override_config.attn_implementation"),
                lambda cfg: "sdpa"),
    CostSetting("parameter / optimizer offload", _any(f"{ACTOR}.fsdp_config.param_offload",
                                                      f"{ACTOR}.fsdp_config.optimizer_offload"),
                lambda cfg: False),
    CostSetting("update micro-batch (sequences)",
                lambda c: get(c, f"{ACTOR}.ppo_micro_batch_size_per_gpu"),
                lambda cfg: cfg.train.micro_batch_size),
    CostSetting("log-prob micro-batch (sequences)",
                lambda c: (get(c, f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu"),
                           get(c, f"{REF}.log_prob_micro_batch_size_per_gpu")),
                lambda cfg: (cfg.train.micro_batch_size, cfg.train.micro_batch_size)),
    CostSetting("micro-batches by token budget", _any(f"{ACTOR}.use_dynamic_bsz"),
                lambda cfg: cfg.train.micro_batch_tokens is not None),
    CostSetting("padding removed in training", _any(f"{A}.model.use_remove_padding"),
                lambda cfg: cfg.train.micro_batch_tokens is not None, listed_as=PADDING),
    CostSetting("entropy computed", lambda c: bool(get(c, f"{ACTOR}.calculate_entropy")) or
                bool(get(c, f"{ACTOR}.entropy_coeff")), lambda cfg: False),
    CostSetting("optimizer steps per iteration",
                lambda c: (get(c, f"{ACTOR}.ppo_epochs") or 1) * max(
                1, (get(c, "data.train_batch_size") or get(c, f"{ACTOR}.ppo_mini_batch_size"))
                // (get(c, f"{ACTOR}.ppo_mini_batch_size") or 1)),
                lambda cfg: cfg.train.ppo_mini_batches),
    CostSetting("samples in flight (rollout)", lambda c: get(c, f"{ROLLOUT}.max_num_seqs"),
                lambda cfg: cfg.rollout.max_num_seqs),
    CostSetting("generation engine", lambda c: get(c, f"{ROLLOUT}.name"),
                lambda cfg: cfg.rollout.backend,
                listed_as=GENERATION),
)


def compare(config: dict | None, cfg) -> list[dict]:
    """One row per cost setting: both values, whether equal, and the difference that lists it (or
    None)."""
    if config is None:
        return [{"setting": "VERL's resolved config", "verl": "not written", "rlbench": "needed",
                 "equal": False,
                 "listed_as": None}]
    rows = []
    for s in COST_SETTINGS:
        verl, ours = s.verl(config), s.rlbench(cfg)
        equal = verl == ours
        rows.append({"setting": s.name, "verl": verl, "rlbench": ours, "equal": equal,
                     "listed_as": None if equal else s.listed_as})
    return rows


def unlisted(rows: list[dict]) -> list[str]:
    """The cost settings whose values differ and that no listed difference explains."""
    return [f"{r['setting']}: VERL {r['verl']!r}, rlbench {r['rlbench']!r}" for r in rows
            if not r["equal"] and r["listed_as"] is None]
