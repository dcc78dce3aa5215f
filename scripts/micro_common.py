"""What the micro-benchmarks share (scripts/micro.py): a randomly initialised model from a config JSON,
a timer that synchronises the device, a random GRPO group."""
from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch


class _Tree:
    """Finds `rlbench` in another source tree (pyproject.toml's package-dir: bench/, engines/, reports/)."""

    def __init__(self, root: Path):
        self.dirs = {"rlbench": root / "bench", "rlbench.engines": root / "engines", "rlbench.reports": root / "reports"}

    def find_spec(self, name, path=None, target=None):
        d = self.dirs.get(name)
        if d is None:
            return None
        return importlib.util.spec_from_file_location(name, d / "__init__.py", submodule_search_locations=[str(d)])


def use_tree(root: Path) -> None:
    """Import rlbench from the source tree `root` (e.g. a worktree of an older commit), not the installed
    one: the same benchmark measures two versions in one run. Call before anything imports rlbench."""
    if "rlbench" in sys.modules:
        raise RuntimeError("use_tree must come before rlbench is imported")
    sys.meta_path.insert(0, _Tree(Path(root).resolve()))


def build(model_json: Path | str, dtype: torch.dtype, device: torch.device, attn: str = "sdpa",
          layers: int | None = None, **overrides):
    """A randomly initialised model (seed 0) of the config JSON, or of the tiny model's shape ("tiny": the
    defaults of model.*, the character vocabulary); `layers` decoder layers instead of the config's;
    overrides replace the JSON's values (e.g. vocab_size)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if str(model_json) == "tiny":
        from rlbench.core.config import ModelConfig
        from rlbench.engines.model.shape import tiny_config
        from rlbench.engines.model.tokenizer import CharTokenizer

        mcfg = ModelConfig() if layers is None else ModelConfig(num_layers=layers)
        cfg = tiny_config(mcfg, CharTokenizer().vocab_size)
    else:
        values = {k: v for k, v in json.loads(Path(model_json).read_text()).items() if not k.startswith("_")}
        values.update({k: v for k, v in {"num_hidden_layers": layers, **overrides}.items() if v is not None})
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


