"""What the micro-benchmarks share (scripts/micro.py): a randomly initialised model from a config JSON,
a timer that synchronises the device, a random GRPO group."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch


def build(model_json: Path, dtype: torch.dtype, device: torch.device, attn: str = "sdpa", **overrides):
    """The config JSON's architecture, randomly initialised (seed 0); overrides replace its values
    (e.g. num_hidden_layers, vocab_size)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    values = {k: v for k, v in json.loads(model_json.read_text()).items() if not k.startswith("_")}
    values.update({k: v for k, v in overrides.items() if v is not None})
    cfg = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)


def timed(fn, device, rounds: int, warmup: int) -> float:
    """Median seconds of fn() over `rounds` after `warmup` calls, the device synchronised around each."""
    from rlbench.core.devices.device import synchronize

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        synchronize(device)
        t = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def group(vocab: int, P: int, R: int, G: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab, (P,), generator=g).tolist()
    return prompt, [torch.randint(0, vocab, (R,), generator=g).tolist() for _ in range(G)]


