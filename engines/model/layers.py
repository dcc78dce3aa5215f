"""The pieces of a pre-norm decoder layer (Llama, Qwen2, Qwen3) that rlbench runs itself, around its
own attention: the built-in sampler (KV cache, continuous batching) and the shared-prompt packer
(one packed stream) both call these, so a model family is supported in one place.

The layer's own modules do the work (norms, projections, MLP), and RoPE is the model's own function,
so the result equals the HF layer's forward; the tests compare both users with HF.
"""
from __future__ import annotations

import importlib

import torch


def attention_inputs(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """x [..., T, D] hidden states -> q [..., T, H, Dh], k and v [..., T, Hkv, Dh].

    input_layernorm, the q/k/v projections, Qwen3's per-head q/k RMSNorm (before RoPE, as HF) and
    RoPE with cos/sin [..., T, Dh] broadcast over the heads."""
    attn = layer.self_attn
    h = layer.input_layernorm(x)
    heads = (*x.shape[:-1], -1, attn.head_dim)
    q, k, v = attn.q_proj(h).view(heads), attn.k_proj(h).view(heads), attn.v_proj(h).view(heads)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    return rope(attn)(q, k, cos, sin, unsqueeze_dim=-2)[0:2] + (v,)


_ROPE: dict = {}  # attention class -> its family's apply_rotary_pos_emb


def rope(attn):
    """The model family's own RoPE function (its modeling module's `apply_rotary_pos_emb`), looked
    up once per attention class: a compiled caller (engines/model/compiled.py) then traces it
    without a break."""
    cls = type(attn)
    if cls not in _ROPE:
        _ROPE[cls] = importlib.import_module(cls.__module__).apply_rotary_pos_emb
    return _ROPE[cls]


def finish(layer, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """Residual + o_proj of the attention output o [..., T, H*Dh], then the MLP block -> [..., T,
    D]."""
    x = x + layer.self_attn.o_proj(o)
    return x + layer.mlp(layer.post_attention_layernorm(x))


def check_supported(model) -> None:
    """Full attention with Llama-style q/k/v/o projections, or NotImplementedError naming what
    differs."""
    types = set(getattr(model.config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        raise NotImplementedError(f"rlbench's own layers support full attention only, model has "
                                  f"layers {sorted(types)}")
    if not hasattr(model.model.layers[0].self_attn, "q_proj"):
        raise NotImplementedError("rlbench's own layers need Llama-style q/k/v/o projections, got "
                                  f"{type(model).__name__}")
