"""The vLLM rollout backend (GPU): the `RolloutBackend` protocol on a vLLM engine in this process.

Targets vLLM's V1 engine, version 0.11 or newer (APIs checked against the vLLM docs of 0.10.2
through 0.28; Dockerfile.gpu pins the version it installs). What it relies on:

- Streaming groups: every sample is its own request (`n=1`) added with `LLMEngine.add_request`;
  `LLMEngine.step()` is called until all are done, and a group is emitted (`on_group`) the moment the
  last of its G requests finishes, not when the batch ends. vLLM's scheduler does the continuous
  batching (`max_num_seqs` in flight) and prefix caching shares a prompt's K/V across its G samples.
- Seeds: request j of prompt i gets `SamplingParams(seed=sample_seed(seed, iteration, i, j))`, the
  seed the built-in sampler uses, so a sample's random stream does not depend on batching. (The
  tokens themselves differ from the built-in sampler's: vLLM draws its own way.)
- Behaviour log-probs: `logprobs=0` returns the sampled token's log-prob; the engine is created with
  `logprobs_mode="processed_logprobs"` so that it is log_softmax(logits / temperature) like the
  trainer's (vLLM's default, raw_logprobs, ignores the temperature). With top_p < 1 vLLM reports the
  log-prob renormalised inside the nucleus (the built-in sampler reports it before top-p).
- Weight sync: the engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so
  `llm.llm_engine.model_executor.driver_worker.worker.model_runner.model.load_weights(...)` copies
  the trainer's tensors into the running engine (HF parameter names; vLLM fuses q/k/v and gate/up
  itself); then the prefix cache is reset, since cached prompt K/V came from the old weights.
- Response lengths (rollout.response_length fixed | lognormal): `max_tokens` = the drawn length and
  `ignore_eos=True`. No `min_tokens`: it would mask EOS and change the distribution the trainer scores.

The engine starts from `load_format="dummy"` on a config.json written from the policy's config (no
tokenizer: token ids in, token ids out), and the first `load_weights` installs the real weights.
"""
from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from rlbench.engines.rollout.base import Group, PendingGroup, PromptRequest, SamplingParams
from rlbench.errors import UserError

NOT_INSTALLED = ("rollout.backend=vllm needs vLLM, which needs a CUDA GPU: pip install 'rlbench[gpu]' on a "
                 "GPU machine (or use Dockerfile.gpu); vllm is not importable here (use rollout.backend=builtin)")
# Architectures HF configs built in memory may not name (from_config leaves `architectures` empty).
ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "mistral": "MistralForCausalLM"}


def import_vllm():
    """vllm, imported only here and only when the vLLM backend is built; UserError when missing."""
    try:
        import vllm
    except ImportError:
        raise UserError(NOT_INSTALLED) from None
    return vllm


def write_model_dir(model_config, folder: str | Path, dtype: str) -> Path:
    """config.json for vLLM from an HF config: architectures filled in, no quantization claim (a GGUF
    policy is de-quantized in memory), dtype set. -> the folder."""
    d = model_config.to_dict()
    d.pop("quantization_config", None)
    if not d.get("architectures"):
        if d.get("model_type") not in ARCHITECTURES:
            raise UserError(f"rollout.backend=vllm: no vLLM architecture known for model_type={d.get('model_type')!r}")
        d["architectures"] = [ARCHITECTURES[d["model_type"]]]
    d["torch_dtype"] = d["dtype"] = dtype
    folder = Path(folder)
    (folder / "config.json").write_text(json.dumps(d, indent=1, default=str))
    return folder


class VLLMBackend:
    """`RolloutBackend` over a vLLM engine (one GPU, bf16 by default)."""

    def __init__(self, model_config, eos_token_id: int, max_num_seqs: int = 32, device=None, *,
                 dtype: str = "bfloat16", seed: int = 0, gpu_memory_utilization: float = 0.4,
                 max_model_len: int | None = None, enforce_eager: bool = False):
        if device is not None and str(device).split(":")[0] != "cuda":
            raise UserError(f"rollout.backend=vllm needs engine.device=cuda (got {device}); "
                            "use rollout.backend=builtin on CPU and NPU")
        # The engine core in this process: load_weights then reaches the model object directly.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm = import_vllm()
        self.eos_token_id, self.max_num_seqs = int(eos_token_id), int(max_num_seqs)
        self.version = 0
        self.last_stats: dict = {}
        self._ids = itertools.count()
        self._dir = tempfile.TemporaryDirectory(prefix="rlbench-vllm-")
        write_model_dir(model_config, self._dir.name, dtype)
        self.llm = vllm.LLM(
            model=self._dir.name, skip_tokenizer_init=True, load_format="dummy", dtype=dtype, seed=seed,
            max_num_seqs=self.max_num_seqs, gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len, enable_prefix_caching=True, enforce_eager=enforce_eager,
            logprobs_mode="processed_logprobs", generation_config="vllm")

    # ---------------------------------------------------------------- weights

    def _model(self):
        """The torch module inside the running engine (needs the in-process engine core)."""
        executor = getattr(self.llm.llm_engine, "model_executor", None)
        if executor is None:
            raise UserError("rollout.backend=vllm: the vLLM engine core runs in another process; run with "
                            "VLLM_ENABLE_V1_MULTIPROCESSING=0 so weights can be loaded into it")
        worker = executor.driver_worker
        worker = getattr(worker, "worker", worker)  # V1 wraps the worker in a WorkerWrapperBase
        return worker.model_runner.model

    def load_weights(self, state: dict, version: int) -> None:
        """Copy the trainer's parameters (HF names) into the engine; later samples carry `version`."""
        import torch

        model = self._model()
        p = next(model.parameters())
        with torch.no_grad():
            model.load_weights((n, t.detach().to(p.device, p.dtype)) for n, t in state.items())
        self.llm.reset_prefix_cache()  # cached prompt K/V were computed with the old weights
        self.version = version

    # ---------------------------------------------------------------- generation

    def _params(self, sp: SamplingParams, index: int, j: int):
        """vLLM SamplingParams of sample j of request `index` (n=1: one request per sample)."""
        from vllm import SamplingParams as VllmParams
        from vllm.sampling_params import RequestOutputKind

        from rlbench.engines.rollout.sampling import sample_seed, target_length

        kw = dict(n=1, logprobs=0, detokenize=False, output_kind=RequestOutputKind.FINAL_ONLY)
        if sp.greedy:
            kw.update(temperature=0.0)
        else:
            kw.update(temperature=sp.temperature, top_p=sp.top_p, seed=sample_seed(sp.seed, sp.iteration, index, j))
        length = target_length(sp, index, j)
        if length is None:  # no tokenizer in the engine: EOS must be named
            kw.update(max_tokens=sp.max_new_tokens, stop_token_ids=[self.eos_token_id])
        else:
            kw.update(max_tokens=length, ignore_eos=True)
        return VllmParams(**kw)

    def generate(self, requests: list[PromptRequest], sampling: SamplingParams,
                 on_group: Callable[[Group], None] | None = None) -> list[Group]:
        """G samples per request, one vLLM request each; on_group(group) the moment its G are done.
        -> groups in completion order. Sets `last_stats` like the built-in sampler."""
        engine = self.llm.llm_engine
        pending: dict[str, tuple[PendingGroup, int]] = {}
        for r in requests:
            state = PendingGroup(r, sampling.n)
            for j in range(sampling.n):
                rid = f"rlbench-{next(self._ids)}"
                engine.add_request(rid, {"prompt_token_ids": list(r.prompt_ids)}, self._params(sampling, r.index, j))
                pending[rid] = (state, j)
        out: list[Group] = []
        steps = active_sum = tokens = 0
        while pending:
            if not engine.has_unfinished_requests():
                raise RuntimeError(f"vLLM finished with {len(pending)} requests unanswered")
            active_sum += min(engine.get_num_unfinished_requests(), self.max_num_seqs)
            steps += 1
            for o in engine.step():
                if o.finished and o.request_id in pending:
                    tokens += self._collect(o, *pending.pop(o.request_id), out, on_group)
        self.last_stats = {"decode_steps": steps, "mean_active": active_sum / steps if steps else 0.0,
                           "max_num_seqs": self.max_num_seqs, "tokens_generated": tokens}
        return out

    def _collect(self, output, state: PendingGroup, j: int, out: list[Group], on_group) -> int:
        """Store a finished request's tokens and behaviour log-probs; emit its group when complete."""
        c = output.outputs[0]
        toks = list(c.token_ids)
        logprobs = [float(c.logprobs[t][tok].logprob) for t, tok in enumerate(toks)]
        eos = c.finish_reason == "stop"  # EOS; "length" = max_tokens or the drawn length
        state.finish(j, toks, logprobs, eos, self.version, out, on_group)
        return len(toks)

    def close(self) -> None:
        self.llm = None
        self._dir.cleanup()
