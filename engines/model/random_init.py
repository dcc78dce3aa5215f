"""The random initialisation of a named architecture (model.kind hf_config), in parallel and
reproducible.

Hugging Face initialises a model as it builds it: each Linear first by torch's default (Kaiming
uniform), then again by the model's `_init_weights` (normal), one tensor after another on one core.
For the Qwen2.5-0.5B shape that took 11-15 s on the 2-core development machine, once per run before
any cell could start (the first cell's model phase, weight file included, was 32 s on an H100's
host). Here the model is built without initialising anything, then every parameter is drawn once, as
`_init_weights` of these architectures draws it (Linear and Embedding weights normal(0,
initializer_range), biases zero, norm weights one), in fixed chunks each with its own generator, by
as many threads as the process has cores: the same weights whatever the number of threads that draw
them.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from rlbench.core.devices import device as dev

# elements drawn by one generator: fixed, so the weights do not depend on the threads
CHUNK = 1 << 22


def initialise(model: nn.Module, std: float, seed: int, threads: int | None = None) -> None:
    """Draw every parameter of `model` in place (see the module's docstring). A parameter of a
    module kind other than Linear, Embedding or a norm is refused: it would be left as whatever
    memory held."""
    draws, constants = [], []
    seen: set[int] = set()
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:  # a tied head is its embedding: drawn once
                continue
            seen.add(id(p))
            name = f"{mname}.{pname}" if mname else pname
            if pname == "bias":
                constants.append((p, 0.0))
            elif isinstance(module, (nn.Linear, nn.Embedding)):
                draws.append(p)
            elif "norm" in type(module).__name__.lower():
                constants.append((p, 1.0))
            else:
                raise ValueError(f"no random initialisation for {name} ({type(module).__name__})")
    with torch.no_grad():
        for p, value in constants:
            p.fill_(value)
        # detached: grad mode is per thread, and the drawing threads' is on
        # each chunk's generator seeded by the run's seed, the parameter and the chunk's place in it
        chunks = [(p.detach().view(-1)[a:a + CHUNK], _mix(seed, i, a // CHUNK))
                  for i, p in enumerate(draws)
                  for a in range(0, p.numel(), CHUNK)]
        # the cores the process may use, not its torch threads: a run's driver keeps one intra-op
        # thread
        with ThreadPoolExecutor(threads or len(dev.cpu_cores())) as pool:
            list(pool.map(lambda c: c[0].normal_(0.0, std,
                                                 generator=torch.Generator().manual_seed(c[1])),
                          chunks))
        for module in model.modules():
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()


def _mix(*values: int) -> int:
    """A 32-bit seed from several integers (splitmix64's finaliser): torch's CPU generator keeps
    only the low 32 bits of a seed, so the integers cannot simply sit side by side in a 64-bit
    one."""
    h = 0
    for v in values:
        h = (h + 0x9E3779B97F4A7C15 + v) % 2**64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) % 2**64
        h ^= h >> 31
    return h & 0xFFFFFFFF
