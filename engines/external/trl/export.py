"""The policy rlbench would train, as a Hugging Face directory TRL can load: the same weights, the
same tokenizer (the tiny model's characters as a `PreTrainedTokenizerFast`), cached so only a first
run pays.

TRL needs a directory, not only a model object: with a KL coefficient its GRPOTrainer builds the
reference model by loading the policy's `config._name_or_path` again. The weights come from
rlbench's own loader (engines/model/loader.py: the cached warm start of the tiny model, a GGUF
de-quantized to the configured dtype, a seeded random init of an architecture), so both engines
start from the same tensors.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from rlbench.engines.model.loader import (config_file, gguf_file, load_policy,
                                          model_config_and_tokenizer)
from rlbench.engines.model.tiny import cache_key, cache_root
from rlbench.engines.model.tokenizer import BOS, CHARS, EOS, PAD, HFTokenizer

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN = "<pad>", "<s>", "</s>"


def char_tokenizer():
    """The character tokenizer as a `PreTrainedTokenizerFast`: one token per character, ids as
    CharTokenizer's (PAD 0, BOS 1, EOS 2, then CHARS), BOS prepended to a text encoded with special
    tokens (as CharTokenizer.prompt_ids does), decoding that joins the characters back without
    spaces."""
    vocab = {PAD_TOKEN: PAD, BOS_TOKEN: BOS, EOS_TOKEN: EOS,
             **{ch: i + 3 for i, ch in enumerate(CHARS)}}
    # an unknown character reads as '?', as CharTokenizer
    tok = Tokenizer(models.WordLevel(vocab, unk_token="?"))
    # every character, newline too
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS_TOKEN} $A",
                                                       special_tokens=[(BOS_TOKEN, BOS)])
    # '?' is the unknown token of the model only: declared to transformers it would be special, and
    # decoding with skip_special_tokens (TRL's) would drop every question mark.
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD_TOKEN, bos_token=BOS_TOKEN,
                                   eos_token=EOS_TOKEN)


def load_tokenizer(folder: Path, cfg):
    """The exported directory's tokenizer for TRL (its `processing_class`)."""
    if uses_chars(cfg):  # AutoTokenizer would pick the architecture's own tokenizer class
        return PreTrainedTokenizerFast.from_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def rlbench_tokenizer(folder: Path, cfg):
    """rlbench's tokenizer adapter over the same tokenizer (its evaluation encodes and decodes with
    it): the character tokenizer as rlbench's engine has it (inside a random model's whole
    vocabulary for hf_config, where a sampled id past the characters decodes to nothing), else the
    exported directory's."""
    if uses_chars(cfg):
        return model_config_and_tokenizer(cfg)[1]
    return HFTokenizer(load_tokenizer(folder, cfg))


def uses_chars(cfg) -> bool:
    return cfg.model.kind == "tiny" or (cfg.model.kind == "hf_config" and not cfg.model.tokenizer)


def export_key(cfg) -> str:
    """Everything that shapes the exported weights: the model section, the seed, and what the
    weights are read from (the tiny model's own cache key; a GGUF or config file by path, size and
    mtime)."""
    m = cfg.model
    parts: dict = {"model": m.model_dump(mode="json"), "seed": cfg.run.seed}
    if m.kind == "tiny":
        parts["tiny"] = cache_key(cfg)
    elif m.kind == "gguf":
        f = gguf_file(m.path)
        parts["file"] = [str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns]
    elif m.kind == "hf_config":
        parts["file"] = hashlib.sha256(config_file(m.path).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def export_policy(cfg, dataset, progress=None) -> Path:
    """-> a Hugging Face directory (config, weights, tokenizer) holding rlbench's initial policy for
    cfg. model.kind=hf is such a directory already and is used as it is."""
    if cfg.model.kind == "hf":
        return Path(cfg.model.path).resolve()

    folder = cache_root() / "hf-export" / f"{cfg.model.kind}-{export_key(cfg)}"
    if (folder / "config.json").is_file():
        return folder

    model, tok, _ = load_policy(cfg, dataset, progress=progress)
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    _plain(model).save_pretrained(tmp)
    (char_tokenizer() if uses_chars(cfg) else tok.tok).save_pretrained(tmp)
    # another process may have exported it meanwhile: same bytes, keep theirs
    if not folder.exists():
        os.replace(tmp, folder)
    return folder


def _plain(model):
    """A model transformers will save: one loaded from a GGUF file is marked quantized (and refuses
    save_pretrained) although its weights are de-quantized tensors, so those go into a fresh model
    of the same config, unmarked."""
    if getattr(model, "hf_quantizer", None) is None:
        return model

    config = copy.deepcopy(model.config)
    for key in ("quantization_config", "gguf_file"):
        if hasattr(config, key):
            delattr(config, key)
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype, attn_implementation="sdpa")
    plain.load_state_dict(model.state_dict())
    return plain
