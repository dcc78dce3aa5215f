"""Every setting that changes what a TRL iteration costs, beside rlbench's, refused by default.

Two checks, both read from what TRL resolved (its trainer's `args` after it was built, every field,
and the model it built), so that a setting moved anywhere shows here, not only in a translation
never applied:

- every resolved GRPOConfig field is diffed against a GRPOConfig built, untouched, from rlbench's
  translation of the run's config (settings.grpo_kwargs; the worker builds it beside the trainer's:
  `reference_args`). Any field that differs fails the check (`unlisted`) unless ALLOWED names it
  with the reason it cannot change what an iteration costs: a micro-batch of 1, an fp32 LM head,
  eager attention in model_init_kwargs or generation without its KV cache are all differences of
  cost;
- a few settings are compared with what rlbench's engines do (COST_SETTINGS), because a TRL default
  that moves would move in both GRPOConfigs alike (GRPOConfig turned activation checkpointing on by
  default): its trainer never checkpoints, compiles or patches kernels (no config key asks it to),
  trains in model.dtype without autocast under SDPA attention, always batches generation
  continuously, and generates an iteration's prompts x G samples at once; it compiles only where
  engine.compile asks (unset: on CUDA), which the peer ablations set off. Where one of these must
  differ, the run lists it (settings.DIFFERENCES, results.json external.differences).

The run records what is not equal, allowed or listed as warnings;
tests/unit/engines/test_trl_cost_settings.py fails on any.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from rlbench.engines.external.trl.settings import SAMPLING


@dataclass(frozen=True)
class CostSetting:
    name: str
    # (TRL's resolved args as JSON, facts of its built model) -> value
    trl: Callable[[dict, dict], Any]
    rlbench: Callable[[Any], Any]  # the RunConfig -> rlbench's value
    # the difference that explains it where the two differ (None: must be equal)
    listed_as: str | None = None


def _precision(args: dict, model: dict) -> str:
    autocast = ("bf16 autocast" if args.get("bf16") else "fp16 autocast" if args.get("fp16")
                else "no autocast")
    return f"{model.get('dtype', '?')}, {autocast}"


def _kernels(args: dict, _model: dict) -> bool:
    return bool(args.get("use_liger_kernel")
                or (args.get("model_init_kwargs") or {}).get("use_kernels"))


def rlbench_compiles(cfg) -> bool:
    """Whether rlbench's engine compiles anything under cfg (engine.compile; unset: on CUDA only).
    The peer ablations set it off (bench/experiments/peers/cells.py BASE), as TRL runs eager."""
    from rlbench.core.devices import device as dev  # inside: resolving `auto` imports torch

    return bool(dev.compile_targets(cfg.engine.compile, dev.resolve_kind(cfg.engine.device)))


COST_SETTINGS: tuple[CostSetting, ...] = (
    CostSetting("activation (gradient) checkpointing",
                lambda a,
                m: bool(a.get("activation_checkpointing") or a.get("gradient_checkpointing")
                                  or m.get("checkpointing")), lambda cfg: False),
    CostSetting("precision", _precision, lambda cfg: f"{cfg.model.dtype}, no autocast"),
    CostSetting("torch.compile", lambda a, m: bool(a.get("torch_compile")),
                lambda cfg: rlbench_compiles(cfg)),
    CostSetting("Liger / hub kernels", _kernels, lambda cfg: False),
    CostSetting("attention kernel", lambda a, m: m.get("attn_implementation"), lambda cfg: "sdpa"),
    CostSetting("continuous batching", lambda a,
                m: bool(a.get("use_transformers_continuous_batching")),
                lambda cfg: True, listed_as=SAMPLING),
    CostSetting("generation batch size (samples)", lambda a, m: a.get("generation_batch_size"),
                lambda cfg: cfg.batch_size),
)


# GRPOConfig fields that may differ from the reference without changing what an iteration costs:
# field -> why
ALLOWED: dict[str, str] = {
    "output_dir": "where TRL would write checkpoints (save_strategy, which is compared, says "
                  "whether it does)",
    "logging_dir": "where a logger would write (report_to, which is compared, says whether one "
                   "does)",
    "run_name": "a label for loggers",
    "hub_token": "redacted by to_dict: a credential, never a cost",
    "hub_model_id": "the Hub repository name (push_to_hub, which is compared, says whether it "
                    "pushes)",
}


def model_facts(model) -> dict:
    """What the built model says about its cost: its dtype, its attention kernel, and whether it
    checkpoints activations."""
    flag = getattr(model, "is_activation_checkpointing", None)
    if flag is None:  # transformers before 5.x names it is_gradient_checkpointing
        flag = getattr(model, "is_gradient_checkpointing", False)
    return {"dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "checkpointing": bool(flag),
            "attn_implementation": getattr(model.config, "_attn_implementation", None)}


def reference_args(grpo_config, kwargs: dict) -> dict:
    """The reference for the field diff: GRPOConfig (the class, passed in: trl is imported by the
    worker only) built from rlbench's translation alone, resolved as the trainer's arguments are."""
    return resolved_args(grpo_config(**kwargs))


def resolved_args(args) -> dict:
    """TRL's resolved arguments, every field, as JSON (TrainingArguments.to_dict: enums by value,
    tokens redacted)."""
    return json.loads(json.dumps(args.to_dict(), default=str))


def compare(args: dict, model: dict, cfg, listed: list[str], reference: dict | None) -> list[dict]:
    """One row per cost setting (both values, whether equal, and the difference that lists it, or
    None), then one per GRPOConfig field whose resolved value differs from the reference's
    (reference_args; None: a run that recorded none, whose fields cannot be checked: one failing row
    says so), allowed only with ALLOWED's reason."""
    rows = []
    for s in COST_SETTINGS:
        trl, ours = s.trl(args, model), s.rlbench(cfg)
        equal = trl == ours
        rows.append({"setting": s.name, "trl": trl, "rlbench": ours, "equal": equal,
                     "listed_as": None if equal
                                  else (s.listed_as if s.listed_as in listed else None)})
    return rows + field_diff(args, reference)


def field_diff(args: dict, reference: dict | None) -> list[dict]:
    """The rows of every resolved field that differs from the reference's (a field only one side has
    differs too)."""
    if reference is None:
        return [{"setting": "GRPOConfig fields", "trl": "resolved",
                 "rlbench": "no reference recorded",
                 "equal": False, "listed_as": None}]
    missing = object()
    out = []
    for key in sorted(set(args) | set(reference)):
        trl, ours = args.get(key, missing), reference.get(key, missing)
        if trl != ours:
            out.append({"setting": f"GRPOConfig.{key}", "trl": None if trl is missing else trl,
                        "rlbench": None if ours is missing else ours, "equal": False,
                        "listed_as": f"allowed: {ALLOWED[key]}" if key in ALLOWED else None})
    return out


def unlisted(rows: list[dict]) -> list[str]:
    """The cost settings whose values differ and that no listed difference explains."""
    return [f"{r['setting']}: TRL {r['trl']!r}, rlbench {r['rlbench']!r}" for r in rows
            if not r["equal"] and r["listed_as"] is None]
