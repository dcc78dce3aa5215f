"""Every setting that changes what a TRL iteration costs, beside rlbench's: read from the arguments TRL
resolved (its trainer's `args` after it was built) and from the model it built, so a default that moves
under a new TRL (GRPOConfig turned activation checkpointing on by default) shows here, not only in a
translation that was never applied.

A setting whose two values differ must be one of the differences the run lists (settings.DIFFERENCES,
results.json external.differences); `unlisted` names those that are not, and the run records them as
warnings (tests/test_trl_cost_settings.py fails on any). rlbench's side of each is what its engines do:
its trainer never checkpoints, compiles or patches kernels (no config key asks it to), trains in
model.dtype without autocast, packs a group only with engine.shared_prompt, always batches generation
continuously, and generates an iteration's prompts x G samples at once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from rlbench.engines.external.trl.settings import SAMPLING


@dataclass(frozen=True)
class CostSetting:
    name: str
    trl: Callable[[dict, dict], Any]  # (TRL's resolved args as JSON, facts of its built model) -> value
    rlbench: Callable[[Any], Any]  # the RunConfig -> rlbench's value
    listed_as: str | None = None  # the difference that explains it where the two differ (None: must be equal)


def _precision(args: dict, model: dict) -> str:
    autocast = "bf16 autocast" if args.get("bf16") else "fp16 autocast" if args.get("fp16") else "no autocast"
    return f"{model.get('dtype', '?')}, {autocast}"


def _kernels(args: dict, _model: dict) -> bool:
    return bool(args.get("use_liger_kernel") or (args.get("model_init_kwargs") or {}).get("use_kernels"))


COST_SETTINGS: tuple[CostSetting, ...] = (
    CostSetting("activation (gradient) checkpointing",
                lambda a, m: bool(a.get("activation_checkpointing") or a.get("gradient_checkpointing")
                                  or m.get("checkpointing")), lambda cfg: False),
    CostSetting("precision", _precision, lambda cfg: f"{cfg.model.dtype}, no autocast"),
    CostSetting("torch.compile", lambda a, m: bool(a.get("torch_compile")), lambda cfg: False),
    CostSetting("Liger / hub kernels", _kernels, lambda cfg: False),
    # GRPOConfig has no padding_free (SFT's): it pads; rlbench pads too unless it packs (shared_prompt)
    CostSetting("padding-free training", lambda a, m: bool(a.get("padding_free")),
                lambda cfg: bool(cfg.engine.shared_prompt)),
    CostSetting("continuous batching", lambda a, m: bool(a.get("use_transformers_continuous_batching")),
                lambda cfg: True, listed_as=SAMPLING),
    CostSetting("generation batch size (samples)", lambda a, m: a.get("generation_batch_size"),
                lambda cfg: cfg.batch_size),
)


def model_facts(model) -> dict:
    """What the built model says about its cost: its dtype, and whether it checkpoints activations."""
    flag = getattr(model, "is_activation_checkpointing", None)
    if flag is None:  # transformers before 5.x names it is_gradient_checkpointing
        flag = getattr(model, "is_gradient_checkpointing", False)
    return {"dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "checkpointing": bool(flag)}


def resolved_args(args) -> dict:
    """TRL's resolved arguments, every field, as JSON (TrainingArguments.to_dict: enums by value, tokens
    redacted)."""
    return json.loads(json.dumps(args.to_dict(), default=str))


def compare(args: dict, model: dict, cfg, listed: list[str]) -> list[dict]:
    """One row per cost setting: both values, whether equal, and the difference that lists it (or None)."""
    rows = []
    for s in COST_SETTINGS:
        trl, ours = s.trl(args, model), s.rlbench(cfg)
        equal = trl == ours
        rows.append({"setting": s.name, "trl": trl, "rlbench": ours, "equal": equal,
                     "listed_as": None if equal else (s.listed_as if s.listed_as in listed else None)})
    return rows


def unlisted(rows: list[dict]) -> list[str]:
    """The cost settings whose values differ and that no listed difference explains."""
    return [f"{r['setting']}: TRL {r['trl']!r}, rlbench {r['rlbench']!r}" for r in rows
            if not r["equal"] and r["listed_as"] is None]
