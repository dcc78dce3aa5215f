"""A policy's shape from its config alone, without torch or transformers' model code: the tiny
model's HF config and the parameter count of the architectures rlbench runs (Qwen2, Llama). What
`rlbench run` checks before it starts a cell (engines/model/loader.py model_facts) needs no weights,
and importing the modelling code costs a process about 2 s of CPU."""
from __future__ import annotations

from transformers import LlamaConfig, Qwen2Config

TINY_POSITIONS = 2048  # the tiny model's max_position_embeddings: prompt + response must fit


def tiny_config(mcfg, vocab_size: int):
    """The HF config of the tiny model (model.arch, model.hidden_size, ...)."""
    cls_cfg = Qwen2Config if mcfg.arch == "qwen2" else LlamaConfig
    return cls_cfg(
        vocab_size=vocab_size, hidden_size=mcfg.hidden_size,
        intermediate_size=mcfg.intermediate_size,
        num_hidden_layers=mcfg.num_layers, num_attention_heads=mcfg.num_heads,
        num_key_value_heads=mcfg.num_kv_heads, max_position_embeddings=TINY_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, attn_implementation="sdpa")


def param_count(c) -> int | None:
    """Parameters of a Qwen2 or Llama causal LM with HF config `c`, as transformers builds it; None
    for another architecture (the caller counts those on the meta device).

    Per layer: q, k, v, o projections (Qwen2: biases on q, k, v; Llama: on all four with
    attention_bias), the gated MLP (biases with Llama's mlp_bias), two RMSNorms; then the embedding,
    the final norm and the LM head unless it is tied to the embedding."""
    kind = getattr(c, "model_type", None)
    if kind not in ("qwen2", "llama"):
        return None
    h, inter, vocab = c.hidden_size, c.intermediate_size, c.vocab_size
    heads = c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    hd = getattr(c, "head_dim", None) or h // heads
    q, k = heads * hd, kv * hd
    if kind == "qwen2":
        attn = h * q + q + 2 * (h * k + k) + q * h
    else:
        bias = bool(getattr(c, "attention_bias", False))
        attn = h * q + 2 * h * k + q * h + (q + 2 * k + h if bias else 0)
    mlp = 3 * h * inter + (2 * inter + h if kind == "llama" and getattr(c, "mlp_bias",
                                                                        False) else 0)
    layer = attn + mlp + 2 * h
    head = 0 if getattr(c, "tie_word_embeddings", False) else vocab * h
    return vocab * h + c.num_hidden_layers * layer + h + head
