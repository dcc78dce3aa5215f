"""What the micro-benchmarks share (scripts/micro.py): a randomly initialised model from a config JSON,
a timer that synchronises the device, a random GRPO group, a count of the kernels a call runs."""
from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

torch._inductor.config.cpp.enable_kernel_profile = True  # each of inductor's CPU kernels a profiler event


class _Tree:
    """Finds `rlbench` in another source tree (setup.py's package-dir: rlbench.X is the top-level folder X/
    where the tree has one, else bench/X: an older tree keeps core/ and analysis/ under bench/)."""

    def __init__(self, root: Path):
        tops = {name: root / name for name in ("core", "engines", "analysis", "reports")}
        self.dirs = {"rlbench": root / "bench",
                     **{f"rlbench.{name}": d for name, d in tops.items() if (d / "__init__.py").is_file()}}

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


# operators that make no kernel of their own: views, metadata, allocations
NO_KERNEL = {"aten::" + n for n in ("view", "_unsafe_view", "as_strided", "t", "transpose", "expand", "reshape",
                                     "resolve_conj", "resolve_neg", "lift_fresh", "detach", "alias", "empty",
                                     "empty_strided", "empty_like", "slice", "select", "unsqueeze", "squeeze",
                                     "permute", "split", "narrow", "unbind", "result_type", "is_nonzero", "item",
                                     "_local_scalar_dense", "_reshape_alias", "expand_as", "view_as", "to",
                                     "contiguous")}  # to, contiguous: a conversion or copy works below them


OWN_WORK = {"aten::addmm", "aten::baddbmm", "aten::addmv"}  # a GEMM of its own beside the bias copy below it


def count_kernels(fn, device) -> int:
    """fn() once under the profiler -> the kernels it ran: on CUDA the device's kernel, copy and set events;
    elsewhere the lowest operators that do work (none that works below them; views, metadata and
    allocations left out; a GEMM with a bias counts itself and its copy) plus each of inductor's fused
    kernels (`graph_*`: profiled by `cpp.enable_kernel_profile`, set below), so a compiled region counts its
    kernels, not its one call. A replayed CUDA graph's kernels count where the profiler sees them."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        fn()
    if cuda:
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    def works(e) -> bool:
        return e.name.startswith("aten::") and e.name not in NO_KERNEL
    return sum(1 for e in prof.events() if e.name.startswith("graph_") or (
        works(e) and (e.name in OWN_WORK or not any(works(c) for c in e.cpu_children))))
