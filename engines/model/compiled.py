"""engine.compile: torch.compile (inductor) of a model's many small kernels, and a count of what it
compiled.

What is compiled is every decoder layer, whoever runs it: HF's forward of unpacked rows runs the
layer's forward compiled whole (attention included); rlbench's own loops (the packed layouts and
token-budget streams in training, the sampler's prefill and decode step) run their own attention
between two compiled functions (`layer_functions`: the input norm, q/k/v projections and RoPE;
o_proj, the residual adds, the second norm and the MLP); the final norm is compiled as a module. A
norm is ~7 elementwise kernels eager and one compiled; RoPE, the residual adds and the MLP's
activation fuse too (kernels per layer: docs/results/decode.md, docs/results/gpu.md). The sampler's
attention and KV cache writes stay as they are (one kernel each already), so its decode step is
still captured as a CUDA graph and replays the compiled kernels.

Shapes are dynamic (`dynamic=True`): one graph serves every length and batch, so a run compiles once
per module kind, tensor rank and grad mode (a handful), not once per shape; every decoder layer's
module shares its kind's graph (torch inlines the parameters). `CompileLog` counts the compilations,
recompilations and their seconds in this process (torch._dynamo's compile-event callbacks) and warns
past RECOMPILE_BOUND.
"""
from __future__ import annotations

import logging
import time
import types

import torch

from rlbench.engines.model import layers

log = logging.getLogger(__name__)

# recompilations in one process past which a run says so (a shape escaping the buckets)
RECOMPILE_BOUND = 16


class CompileLog:
    """This process's compile events: {compiles, recompiles, seconds} (`stats`)."""

    _installed = False
    compiles = recompiles = 0
    seconds = 0.0
    _started: dict = {}
    warned = False

    @classmethod
    def install(cls) -> None:
        """Register the callbacks once per process."""
        if cls._installed:
            return
        handler = torch._dynamo.callback.callback_handler
        handler.register_start_callback(cls._start)
        handler.register_end_callback(cls._end)
        cls._installed = True

    @classmethod
    def _start(cls, args=None) -> None:
        cls._started[getattr(args, "compile_id", None)] = time.monotonic()
        # compile ids read "frame/n": n > 0 is the n-th recompilation of that frame (its guards
        # failed)
        if str(getattr(args, "compile_id", "0/0")).split("/")[-1] not in ("0", "None"):
            cls.recompiles += 1
        else:
            cls.compiles += 1
        if cls.recompiles > RECOMPILE_BOUND and not cls.warned:
            cls.warned = True
            log.warning("engine.compile: %d recompilations in this process (bound %d): a shape or "
                        "mode keeps failing the compiled graphs' guards (TORCH_LOGS=recompiles "
                        "shows which); each costs compile time", cls.recompiles, RECOMPILE_BOUND)

    @classmethod
    def _end(cls, args=None) -> None:
        t = cls._started.pop(getattr(args, "compile_id", None), None)
        if t is not None:
            cls.seconds += time.monotonic() - t

    @classmethod
    def stats(cls) -> dict:
        return {"compiles": cls.compiles, "recompiles": cls.recompiles,
                "seconds": round(cls.seconds, 3)}


def compile_model(model) -> None:
    """Compile the model in place (the model is used as before): each decoder layer's forward whole
    (HF's forward of unpacked rows) and the final norm; and mark the layers `COMPILED`, so that
    rlbench's own decoder loops (the packed layouts, the sampler) run the compiled layer functions
    around their attention (`layer_functions`)."""
    CompileLog.install()
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit,
                                               4 * RECOMPILE_BOUND)
    layers.rope(model.model.layers[0].self_attn)  # looked up eagerly: the traced calls then find it
    base = model.model
    for layer in base.layers[: model.config.num_hidden_layers]:
        _compile(layer)
        setattr(layer, COMPILED, True)
    _compile(base.norm)


COMPILED = "rlbench_compiled"  # a decoder layer's attribute: compile_model compiled it


def layer_functions(layer):
    """-> (attention_inputs, finish) for rlbench's own loop over this decoder layer: compiled where
    compile_model compiled the layer, else engines/model/layers.py's."""
    if getattr(layer, COMPILED, False):
        return _compiled_layer_functions()
    return layers.attention_inputs, layers.finish


_COMPILED: dict = {}  # module class -> its forward compiled once (every instance shares it)


def _compiled_layer_functions():
    """-> (attention_inputs, finish) of engines/model/layers.py compiled, once per process
    (compile_model set up the log). Each is one graph around the layer's matmuls, so the norms, RoPE
    and the residual adds fuse (every layer's call shares the graph: torch inlines the
    parameters)."""
    if "layers" not in _COMPILED:
        _COMPILED["layers"] = (torch.compile(layers.attention_inputs, dynamic=True),
                               torch.compile(layers.finish, dynamic=True))
    return _COMPILED["layers"]


def _compile(module) -> None:
    """module.forward = its class's forward compiled, bound to it. Bound, not closed over: a
    deepcopy of the model (a rollout copy of the policy) binds the same compiled function to the
    copy, so the copy runs with its own weights (a compiled `module.forward` would run the
    original's)."""
    cls = type(module)
    if cls not in _COMPILED:
        _COMPILED[cls] = torch.compile(cls.forward, dynamic=True)
    module.forward = types.MethodType(_COMPILED[cls], module)
