"""Decode micro-benchmark (scripts/micro.py --only sampler): at one batch size, the built-in sampler's
decode step (eager; on CUDA replayed as CUDA graphs; `builtin_compiled`: engine.compile decode, on CUDA
inside the graphs) and HF `generate` on the same model, prompts and lengths: decode tokens/s, step time,
kernels per step, operators dispatched per step and per decoder layer, on CUDA the graph replays per step;
beside the bandwidth floor: the bytes one step must read (every weight once, the KV cache of the live
context) over the copy bandwidth `rlbench env` measures (core/devices/peak.py).

Step time: the mean interval between decode steps within a call (the built-in sampler's own step clock,
which ends each step at its one host sync; for HF, a stopping criterion that reads the clock after each
token), median over rounds; prefill does not count. Per step: a call that generates N tokens per sequence
against one that generates 1 (prefill and first token only), divided by N - 1. Kernels are counted by the
profiler (`count_kernels`: on CUDA the device's own events; elsewhere the operators that do work plus
inductor's fused kernels, so compiled code counts what it runs). Operators are counted by a
TorchDispatchMode (any device; a graph replay dispatches none; not for compiled code, which it would run
eagerly); per layer: those dispatched from a decoder layer's input norm to the end of its MLP, over the
layers.
"""
from __future__ import annotations

import copy
import functools
import statistics
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from micro_common import build, count_kernels


class OpCounter(TorchDispatchMode):
    """Counts the aten operators dispatched while active, and those inside the decoder layers of `model`."""

    def __init__(self, model):
        super().__init__()
        self.total = self.in_layers = 0
        self._inside = False
        self._hooks = []
        for layer in model.model.layers:
            self._hooks.append(layer.input_layernorm.register_forward_pre_hook(lambda *_: self._set(True)))
            self._hooks.append(layer.mlp.register_forward_hook(lambda *_: self._set(False)))

    def _set(self, inside: bool) -> None:
        self._inside = inside

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.total += 1
        self.in_layers += self._inside
        return func(*args, **(kwargs or {}))

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()
        return super().__exit__(*exc)


def count_ops(fn, model) -> tuple[int, int]:
    """fn() once under an OpCounter -> (operators, of them inside decoder layers). A compiled region does not
    run as compiled under a dispatch mode (torch.compile steps aside), so this counts its eager operators."""
    with OpCounter(model) as c:
        fn()
    return c.total, c.in_layers


def per_step(fn, model, device, new_tokens: int, rounds: int, warmup: int, operators: bool = True) -> dict:
    """fn(n, timing) generates n tokens per sequence and returns the mean seconds of its decode steps (timing
    False: nothing added to measure them, when operators are counted). -> the median
    of that over `rounds` (after `warmup` calls), the median seconds of a whole call (prefill included),
    the kernels per decode step and (operators) the operators per decode step and per layer (a call of N
    tokens against one of 1). operators False for compiled code: under the counter's dispatch mode
    torch.compile gives its frames up for good, and the process's later calls would run them eagerly."""
    from rlbench.core.devices.device import synchronize

    n = new_tokens
    for _ in range(warmup):
        fn(n)
    steps, calls = [], []
    for _ in range(rounds):
        synchronize(device)
        t = time.perf_counter()
        steps.append(fn(n))
        synchronize(device)
        calls.append(time.perf_counter() - t)
    kernels_n, kernels_1 = (count_kernels(lambda k=k: fn(k, timing=False), device) for k in (n, 1))
    out = {"step_s": statistics.median(steps), "generate_s": statistics.median(calls),
           "kernels_per_step": (kernels_n - kernels_1) / (n - 1), "ops_per_step": None, "ops_per_layer": None}
    if operators:
        (ops_n, layer_n), (ops_1, layer_1) = (count_ops(lambda k=k: fn(k, timing=False), model) for k in (n, 1))
        out.update(ops_per_step=(ops_n - ops_1) / (n - 1),
                   ops_per_layer=(layer_n - layer_1) / (n - 1) / len(model.model.layers))
    return out


class _StepClock:
    """A StoppingCriteria of HF `generate` that never stops it and reads the clock (device synchronised)
    each time it is asked, once per generated token: the decode steps are the intervals between."""

    def __init__(self, device):
        self.device, self.times = device, []

    def __call__(self, input_ids, scores, **kwargs):
        from rlbench.core.devices.device import synchronize

        synchronize(self.device)
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def step_s(self) -> float:
        t = self.times
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else 0.0


@functools.cache
def _model(model_json: str, dtype, device, layers: int | None):
    """One model per shape for every batch size (neither the samplers nor generate change its weights)."""
    return build(model_json, dtype, device, layers=layers).eval()


@functools.cache
def copy_bandwidth(device, dtype, threads: int) -> float:
    """Bytes/s of `rlbench env`'s copy probe, measured once per process (not the cached value: a floor
    is compared with step times of the same run)."""
    from rlbench.core.devices.peak import measure

    return measure(device, dtype, threads)["copy_bytes_per_s"]


def floor(model, batch: int, context: float, copy_bytes_per_s: float) -> dict:
    """The bandwidth floor of one decode step: every parameter read once (a tied embedding once) and the
    K and V of `context` positions per sequence, at the copy bandwidth."""
    c = model.config
    weights = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * model.dtype.itemsize * context * batch
    return {"weight_bytes": weights, "kv_bytes": int(kv), "copy_bytes_per_s": copy_bytes_per_s,
            "step_s": (weights + kv) / copy_bytes_per_s}


def sampler_bench(model_json: Path | str, device, dtype, batch: int, prompt_len: int, new_tokens: int,
                  rounds: int, warmup: int, layers: int | None = None) -> dict:
    """Decode of `batch` sequences of `new_tokens` after `prompt_len`-token prompts: the built-in sampler
    (eager, and graphs on CUDA) and HF generate, with the floor. model_json: a config JSON or "tiny"."""
    from rlbench.engines.rollout.base import PromptRequest
    from rlbench.engines.rollout.sampler import BuiltinSampler

    model = _model(str(model_json), dtype, device, layers)
    vocab = model.config.vocab_size
    prompts = torch.randint(0, vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(2))
    requests = [PromptRequest(i, p.tolist()) for i, p in enumerate(prompts)]
    res = {"batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens,
           "layers": model.config.num_hidden_layers}
    variants = {"builtin": {}} if device.type != "cuda" else {"builtin_eager": {"cuda_graphs": False},
                                                              "builtin_graphs": {"cuda_graphs": True}}
    # engine.compile decode: each layer's code around its attention compiled (on CUDA inside the graphs), on a
    # copy of the model
    variants["builtin_compiled"] = {"cuda_graphs": True} if device.type == "cuda" else {}
    for name, kw in variants.items():
        try:
            own = copy.deepcopy(model) if name == "builtin_compiled" else model
            sampler = BuiltinSampler(own, vocab - 1, max_num_seqs=batch, device=device, **kw)
            if name == "builtin_compiled":
                sampler.compile()
            res[name] = _builtin(sampler, requests, own, device, new_tokens, rounds, warmup)
            if name == "builtin_compiled":
                res[name]["compile"] = sampler.last_stats.get("compile")
        except Exception as e:  # noqa: BLE001 - one variant failing (on a GPU run) leaves the others' numbers
            res[name] = {"error": f"{type(e).__name__}: {e}"}
    ids = prompts.to(device)

    def hf(n, timing=True):
        from transformers import StoppingCriteriaList

        clock = _StepClock(device)
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                           max_new_tokens=n, min_new_tokens=n, pad_token_id=0,
                           stopping_criteria=StoppingCriteriaList([clock] if timing else []))
        return clock.step_s()
    res["hf_generate"] = per_step(hf, model, device, new_tokens, rounds, warmup)
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    res["floor"] = floor(model, batch, prompt_len + new_tokens / 2, copy_bandwidth(device, dtype, threads))
    for r in [v for k, v in res.items() if isinstance(v, dict) and "step_s" in v]:
        r["decode_tok_s"] = batch / r["step_s"] if r["step_s"] > 0 else float("inf")
    return res


def _builtin(sampler, requests, model, device, new_tokens: int, rounds: int, warmup: int) -> dict:
    """per_step of the built-in sampler, plus its graph replays per decode step where it replays graphs."""
    from rlbench.engines.rollout.sampling import LengthSampling

    def gen(n, timing=True):
        sampler.generate(requests, LengthSampling(n=1, max_new_tokens=n, response_length="fixed",
                                                  response_length_mean=n))
        steps, seconds = sampler.last_stats["step_s_by_active"].get(str(len(requests)), (0, 0.0))
        return seconds / steps if steps else 0.0
    out = per_step(gen, model, device, new_tokens, rounds, warmup, operators=not sampler._compiled)
    runner = getattr(sampler, "_runner", None)  # the static step's (absent before it existed)
    if runner is not None and runner.graphs:
        before = runner.replays
        gen(new_tokens)
        out["replays_per_step"] = (runner.replays - before) / sampler.last_stats["decode_steps"]
    return out


def summary(r: dict) -> str:
    """One line per variant: decode tok/s, step time, its ratio to the floor, operators per step / layer."""
    fl = r["floor"]["step_s"]
    lines = [f"batch {r['batch']} ({r['layers']} layers, prompt {r['prompt_len']}, {r['new_tokens']} new): "
             f"floor {fl * 1e3:.3f} ms/step ({r['floor']['weight_bytes'] / 1e6:.0f} MB weights + "
             f"{r['floor']['kv_bytes'] / 1e6:.1f} MB KV at {r['floor']['copy_bytes_per_s'] / 1e9:.1f} GB/s)"]
    for name in [k for k in r if isinstance(r[k], dict) and ("ops_per_step" in r[k] or "error" in r[k])]:
        v = r[name]
        if "error" in v:
            lines.append(f"  {name:15s} failed: {v['error']}")
            continue
        replays = f", {v['replays_per_step']:.2f} graph replays/step" if "replays_per_step" in v else ""
        ops = "     – ops/step      – ops/layer" if v["ops_per_step"] is None else \
            f"{v['ops_per_step']:6.1f} ops/step  {v['ops_per_layer']:5.1f} ops/layer"
        lines.append(f"  {name:15s} {v['decode_tok_s']:10.1f} tok/s  {v['step_s'] * 1e3:8.3f} ms/step "
                     f"({v['step_s'] / fl:6.1f}x floor)  {ops}  {v['kernels_per_step']:6.1f} kernels/step"
                     f"{replays}")
    return "\n".join(lines)
