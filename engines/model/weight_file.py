"""The run's weight file: the policy's initial weights, built (or loaded) once per run and mapped by
every process that needs them.

A run's first cell loads the policy as the config says (engines/model/loader.py: a warm start, a
random initialisation of a named architecture, a local model, a GGUF file), writes its parameters to
a safetensors file in the run folder with its HF config, and every later cell of the run, and every
worker of every cell, maps that file into memory (safetensors: pages are read from the page cache
when first used, shared by all the processes that read them, and copied only where written) instead
of building its own copy. Cells that start together take a lock on it: one builds, the others wait
and map. The file is keyed by what shapes the weights (the model config and the seed; for the tiny
model also its warm start's data and code), so cells of other models or seeds get their own.
`rlbench run` removes the folder when the run ends.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

from rlbench.engines.model.weights import WeightFile, build_model

FOLDER = ".weights"  # in the run folder, beside the cells' folders


def write_weights(model, path: Path) -> WeightFile:
    """The model's parameters (each tensor once: a tied head is its embedding) into a safetensors
    file, written whole or not at all (temporary file, then rename)."""
    # inside: instant path: `rlbench --help` imports this module
    from safetensors.torch import save_file

    state = {n: p.detach().to("cpu").contiguous() for n, p in model.named_parameters()}
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    save_file(state, str(tmp))
    os.replace(tmp, path)
    return WeightFile(str(path))


def key(cfg) -> str:
    """What shapes the initial weights: the model config and the seed (the tiny model: its warm
    start's cache key, which covers its data, seed and code as well)."""
    if cfg.model.kind == "tiny":
        # inside: instant path: `rlbench --help` imports this module
        from rlbench.engines.model.tiny import cache_key

        return f"tiny-{cache_key(cfg)}"
    parts = {"model": cfg.model.model_dump(mode="json"), "seed": cfg.run.seed}
    return f"{cfg.model.kind}-" + hashlib.sha256(
        json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def folder_of(run_dir: Path, cfg) -> Path:
    return Path(run_dir) / FOLDER / key(cfg)


def policy_once(cfg, dataset, run_dir: Path, progress=None):
    """-> (policy mapped from the run's weight file, tokenizer, info dict, WeightFile), building the
    file first when this is the run's first cell of this model (load_policy; info["weights"]:
    "built" or "mapped")."""
    # inside: instant path: `rlbench --help` imports this module
    from rlbench.engines.model.loader import load_policy, model_config_and_tokenizer

    folder = folder_of(run_dir, cfg)
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / "lock"):
        if not (folder / "info.json").is_file():
            policy, tok, info = load_policy(cfg, dataset, progress)
            policy.config.save_pretrained(folder)
            weights = write_weights(policy, folder / "model.safetensors")
            # a later cell finds a warm-started model ready: it pays no warm start
            # (bench/check/lifecycle.py)
            saved = {**info, "cached": True} if "cached" in info else info
            (folder / "info.json").write_text(json.dumps(saved))
            return _mapped(policy.config, weights), tok, {**info, "weights": "built"}, weights
    info, weights = (json.loads((folder / "info.json").read_text()),
                     WeightFile(str(folder / "model.safetensors")))
    _, tok = model_config_and_tokenizer(cfg)
    return _mapped(_config(folder), weights), tok, {**info, "weights": "mapped"}, weights


def _config(folder: Path):
    """The HF config saved beside the weights (its dtype a torch dtype again, as the loader left
    it)."""
    # inside: instant path: `rlbench --help` imports this module
    import torch
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    if isinstance(getattr(config, "dtype", None), str):
        config.dtype = getattr(torch, config.dtype)
    return config


def _mapped(config, weights: WeightFile):
    """The policy on the CPU over the mapped file (what the driver keeps: it holds no
    accelerator)."""
    import torch  # inside: instant path: `rlbench --help` imports this module

    return build_model(config, torch.device("cpu"), weights.read())


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on `path` (cells of one run starting together: one builds, the others
    wait)."""
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def remove(run_dir: Path) -> None:
    """The run's weight files, once no cell will start any more."""
    shutil.rmtree(Path(run_dir) / FOLDER, ignore_errors=True)
