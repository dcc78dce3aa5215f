"""A rollout worker process: its own model copy and sampler, fed over queues, weights via shared memory.

Messages in:  ("sync", version) | ("generate", iteration, requests, sampling) | ("stop",)
Messages out: ("ready", name) | ("group", name, Group) | ("done", name, iteration, events, stats)
              | ("error", name, traceback text)

The backend (rollout.backend: builtin sampler or vLLM) comes from the environment variable
RLBENCH_ROLLOUT_BACKEND, a JSON spec the parent exports before starting its workers (`export_backend`),
the way profiling settings reach them.
"""
from __future__ import annotations

import json
import os
import traceback

BACKEND_ENV = "RLBENCH_ROLLOUT_BACKEND"
BUILTIN = {"backend": "builtin"}


def backend_spec(cfg) -> dict:
    """The config's rollout backend as a small JSON-able dict (what worker processes receive)."""
    r = cfg.rollout
    return {"backend": r.backend, "dtype": cfg.model.dtype, "seed": cfg.run.seed,
            "gpu_memory_utilization": r.gpu_memory_utilization, "max_model_len": r.max_model_len}


def export_backend(spec: dict) -> None:
    os.environ[BACKEND_ENV] = json.dumps(spec)


def build_backend(spec: dict, model_config, eos_token_id: int, max_num_seqs: int, device, make_model):
    """The rollout backend `spec` names. make_model() -> the HF model the built-in sampler will own;
    vLLM needs only the config (its engine gets the weights through load_weights)."""
    if spec.get("backend", "builtin") == "vllm":
        from rlbench.engines.rollout.vllm_backend import VLLMBackend

        opts = {k: spec[k] for k in ("dtype", "seed", "gpu_memory_utilization", "max_model_len") if k in spec}
        return VLLMBackend(model_config, eos_token_id, max_num_seqs=max_num_seqs, device=device, **opts)
    from rlbench.engines.rollout.sampler import BuiltinSampler

    return BuiltinSampler(make_model(), eos_token_id, max_num_seqs=max_num_seqs, device=device)


def fault_hook(iteration: int, role: str = "rollout") -> None:
    """Test hook: RLBENCH_FAULT=<role>_exit:K (role: rollout, trainer) makes such a worker die at
    iteration K (a crash, no goodbye)."""
    spec = os.environ.get("RLBENCH_FAULT", "")
    if spec.startswith(f"{role}_exit:") and int(spec.split(":")[1]) == iteration:
        os._exit(17)


def rollout_worker_main(name: str, model_config, shared: dict, eos_token_id: int, max_num_seqs: int,
                        threads: int, device_kind: str, t0: float, req_q, out_q) -> None:
    try:
        from rlbench import device as dev
        from rlbench.stages import Recorder, Stage

        dev.set_threads(threads)
        device = dev.resolve(device_kind)
        spec = json.loads(os.environ.get(BACKEND_ENV) or json.dumps(BUILTIN))
        sampler = build_backend(spec, model_config, eos_token_id, max_num_seqs, device,
                                lambda: _build_model(model_config, device))
        sampler.load_weights(shared, 0)
        rec = Recorder(name, t0, device=device, devices=threads)
        from rlbench.profiling import from_env
        prof = from_env(name, device.type)  # a no-op unless the run asked for --profile
        out_q.put(("ready", name))
        while True:
            msg = req_q.get()
            if msg[0] == "stop":
                prof.close()
                return
            if msg[0] == "sync":
                with rec.stage(Stage.WEIGHT_SYNC, msg[2]):
                    sampler.load_weights(shared, msg[1])
            elif msg[0] == "generate":
                _, k, requests, sampling = msg
                fault_hook(k)
                with rec.stage(Stage.ROLLOUT, k):
                    sampler.generate(requests, sampling, on_group=lambda g: out_q.put(("group", name, g)))
                out_q.put(("done", name, k, rec.drain(), dict(sampler.last_stats)))
                prof.step()
    except BaseException:  # report, then die: the trainer turns it into a clear error
        out_q.put(("error", name, traceback.format_exc()))


def _build_model(model_config, device):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(model_config, attn_implementation="sdpa",
                                             dtype=getattr(model_config, "dtype", None) or torch.float32)
    return model.to(device).eval()
