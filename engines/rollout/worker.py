"""A rollout worker: its own model copy behind the configured backend (built-in sampler or vLLM).

It runs in a process pinned to its device or in a Ray actor (engines/hosts.py); weights arrive
through shared memory (local) or the Ray object store, finished groups leave through `emit`.
"""
from __future__ import annotations

import os

BUILTIN = {"backend": "builtin"}


def backend_spec(cfg) -> dict:
    """The config's rollout backend as a small JSON-able dict (what worker processes receive)."""
    r = cfg.rollout
    return {"backend": r.backend, "dtype": cfg.model.dtype, "seed": cfg.run.seed,
            "gpu_memory_utilization": r.gpu_memory_utilization, "max_model_len": r.max_model_len}


def build_backend(spec: dict, model_config, eos_token_id: int, max_num_seqs: int, device, make_model,
                  state: dict | None = None, own_process_group: bool = False):
    """The rollout backend `spec` names. make_model() -> the HF model the built-in sampler will own;
    vLLM starts from the config and `state` (name -> tensor: the weights it loads from an HF directory;
    None: dummy weights until load_weights); own_process_group: this process joins a torch.distributed
    group of its own (colocated ranks), so vLLM's engine core must run in a child process."""
    if spec.get("backend", "builtin") == "vllm":
        from rlbench.engines.rollout.vllm_backend import VLLMBackend

        opts = {k: spec[k] for k in ("dtype", "seed", "gpu_memory_utilization", "max_model_len") if k in spec}
        return VLLMBackend(model_config, eos_token_id, max_num_seqs=max_num_seqs, device=device, state=state,
                           in_process=not own_process_group, **opts)
    from rlbench.engines.rollout.sampler import BuiltinSampler

    return BuiltinSampler(make_model(), eos_token_id, max_num_seqs=max_num_seqs, device=device)


def fault_hook(iteration: int, role: str = "rollout") -> None:
    """Test hook: RLBENCH_FAULT=<role>_exit:K (role: rollout, trainer) makes such a worker die at
    iteration K (a crash, no goodbye)."""
    spec = os.environ.get("RLBENCH_FAULT", "")
    if spec.startswith(f"{role}_exit:") and int(spec.split(":")[1]) == iteration:
        os._exit(17)


class RolloutWorker:
    """A rollout worker (in a pinned process or a Ray actor, engines/hosts.py): a model copy behind the
    configured backend; hands on each group the moment its G samples are done (`emit`)."""

    def __init__(self, slot, model_config, weights, eos_token_id: int, max_num_seqs: int, spec: dict,
                 t0: float, emit):
        from rlbench import device as dev
        from rlbench.profiling import from_env
        from rlbench.stages import Recorder

        device = dev.resolve(slot.kind, slot.index)
        self.name, self.emit = slot.worker, emit
        self.shared = weights if isinstance(weights, dict) else None  # local: shared-memory tensors
        state = load_state(weights)
        self.sampler = build_backend(spec, model_config, eos_token_id, max_num_seqs, device,
                                     lambda: build_model(model_config, device), state)
        self.sampler.load_weights(state, 0)
        self.rec = Recorder(slot.worker, t0, device=device, devices=1)
        self.prof = from_env(slot.worker, device.type)  # a no-op unless the run asked for --profile

    def sync(self, version: int, iteration: int, weights=None) -> None:
        """Load the published weights (this process's shared memory, or the given Ray object)."""
        from rlbench.stages import Stage

        with self.rec.stage(Stage.WEIGHT_SYNC, iteration):
            self.sampler.load_weights(load_state(self.shared if weights is None else weights), version)

    def generate(self, iteration: int, requests, sampling) -> tuple[list, dict]:
        """-> (stage events since the last call, sampler stats); every group is emitted as it finishes."""
        from rlbench.stages import Stage

        fault_hook(iteration)
        with self.rec.stage(Stage.ROLLOUT, iteration):
            self.sampler.generate(requests, sampling, on_group=self.emit)
        self.prof.step()
        return self.rec.drain(), dict(self.sampler.last_stats)

    def evaluate(self, requests, sampling) -> list:
        return self.sampler.generate(requests, sampling)

    def close(self) -> None:
        self.prof.close()
        close = getattr(self.sampler, "close", None)
        if close is not None:
            close()


def load_state(weights) -> dict:
    """Weights as they travel -> name -> tensor: shared-memory tensors (local processes) as they are, a
    Ray object reference (in a list, so that it is fetched here) through the object store."""
    if isinstance(weights, dict):
        return weights
    import ray

    from rlbench.engines.ray_util import from_numpy

    return from_numpy(ray.get(weights[0]))


def build_model(model_config, device):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(model_config, attn_implementation="sdpa",
                                             dtype=getattr(model_config, "dtype", None) or torch.float32)
    return model.to(device).eval()
