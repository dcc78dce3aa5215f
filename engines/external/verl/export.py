"""The policy rlbench would train, as VERL loads it: a Hugging Face model directory (the TRL peer's
export: the same weights, engines/external/trl/export.py) and its tokenizer in a directory of its
own.

The tokenizer directory holds no config.json on purpose: transformers' AutoTokenizer reads the
model_type there and, for a qwen2 model, loads Qwen2's tokenizer class over tokenizer.json, whose
byte-level splitting drops the spaces and newlines of rlbench's character tokenizer. Alone, the
tokenizer loads as it was saved. The character tokenizer gets a chat template that renders a
conversation as rlbench prompts (BOS, then the user's text: the ids CharTokenizer.prompt_ids gives),
so VERL's chat-formatted prompts are rlbench's prompts, token for token.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from rlbench.engines.external.trl.export import (uses_chars, char_tokenizer, export_policy,
                                                 load_tokenizer)

# BOS and the user's message: CharTokenizer.prompt_ids (engines/model/tokenizer.py) as a chat
# template
CHARS_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"


def export_for_verl(cfg, dataset, progress=None) -> tuple[Path, Path]:
    """-> (model directory, tokenizer directory) for VERL's actor_rollout_ref.model.path /
    tokenizer_path."""
    model_dir = export_policy(cfg, dataset, progress=progress)
    tok_dir = model_dir.with_name(f"{model_dir.name}-verl-tokenizer")
    if (tok_dir / "tokenizer_config.json").is_file():
        return model_dir, tok_dir
    tok = char_tokenizer() if uses_chars(cfg) else load_tokenizer(model_dir, cfg)
    if uses_chars(cfg):
        tok.chat_template = CHARS_TEMPLATE
    tmp = tok_dir.with_name(f"{tok_dir.name}.tmp{os.getpid()}")
    tok.save_pretrained(tmp)
    if tok_dir.exists():  # another process wrote the same files meanwhile
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, tok_dir)
    return model_dir, tok_dir
