"""The built-in sampler's forward passes over the HF model's own submodules, with the slot KV cache.

A mixin of BuiltinSampler (engines/rollout/sampler.py), which owns the model, the cache tensors and the slot
state these methods read (`k_cache`, `v_cache` [S, Hkv, Lc, D] per layer; `_tok`, `_pos` [S]; `_rows`):
prefill of one prompt, one decode step of the live slots 0..B-1, and the logits generation computes (for
the tests against HF's forward).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rlbench.engines.model import layers


class SlotForward:
    """Prefill and decode with the slot KV cache; the attributes it reads are set by BuiltinSampler."""

    @staticmethod
    def _qkv(layer, x, cos, sin):
        """x [B, T, hidden] -> q [B, H, T, D], k and v [B, Hkv, T, D] (engines/model/layers.py)."""
        return (t.transpose(1, 2) for t in layers.attention_inputs(layer, x, cos, sin))

    def _logits(self, x):
        """Final norm and lm_head; fp32 logits [..., V] (a half-precision head is upcast after the matmul)."""
        return self.lm_head(self.norm(x)).float()

    def _ensure_rope(self, length: int) -> None:
        """cos/sin tables [length, D] from the model's rotary_emb (static RoPE: one row per position)."""
        if length <= self._rope_len:
            return
        pos = torch.arange(length, device=self.device)[None]
        cos, sin = self.model.model.rotary_emb(torch.zeros(1, dtype=self.dtype, device=self.device), pos)
        self._cos, self._sin, self._rope_len = cos[0], sin[0], length
        self._arange = torch.arange(length, device=self.device)

    # ---------------------------------------------------------------- forward passes

    def _prefill(self, prompt_ids: list[int], all_logits: bool = False):
        """One prompt [P] -> (K/V per layer, each [Hkv, P, D]; logits [V] of the last position, or [P, V])."""
        P = len(prompt_ids)
        x = self.embed(torch.tensor([prompt_ids], device=self.device))  # [1, P, hidden]
        cos, sin = self._cos[None, :P], self._sin[None, :P]  # [1, P, D]
        kv = []
        for layer in self.layers:
            q, k, v = self._qkv(layer, x, cos, sin)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=True)
            x = layers.finish(layer, x, o.transpose(1, 2).reshape(1, P, -1))  # o [1, H, P, D]
            kv.append((k[0], v[0]))
        return kv, self._logits(x[0] if all_logits else x[0, -1])

    def _decode(self, B: int, L: int):
        """Feed each live slot's next token (slots 0..B-1) at its own position; -> logits [B, V] fp32.

        Writes the new K/V into the cache and attends over cache positions [0, L) only, L = max pos + 1.
        """
        pos, rows = self._pos[:B], self._rows[:B]
        x = self.embed(self._tok[:B, None])  # [B, 1, hidden]
        cos, sin = self._cos[pos][:, None], self._sin[pos][:, None]  # [B, 1, D]
        # [B, 1, 1, L]: a slot sees its own prefix and token. Additive (0 / -inf) rather than boolean: the
        # same softmax, and CPU SDPA runs ~15% faster with it.
        mask = torch.where(self._arange[:L] <= pos[:, None], 0.0, float("-inf")).to(self.dtype)[:, None, None]
        rep = self.n_heads // self.n_kv
        for layer, kc, vc in zip(self.layers, self.k_cache, self.v_cache):
            q, k, v = self._qkv(layer, x, cos, sin)  # q [B, H, 1, D], k/v [B, Hkv, 1, D]
            kc[rows, :, pos] = k[:, :, 0]
            vc[rows, :, pos] = v[:, :, 0]
            # GQA without copying K/V: the H = Hkv * rep query heads of one token become rep queries
            # per kv head (head h uses kv head h // rep, as in HF's repeat_kv).
            q = q.reshape(B, self.n_kv, rep, self.head_dim)  # [B, Hkv, rep, D]
            o = F.scaled_dot_product_attention(q, kc[:B, :, :L], vc[:B, :, :L], attn_mask=mask, scale=self.scale)
            x = layers.finish(layer, x, o.reshape(B, 1, -1))  # o [B, Hkv, rep, D]
        return self._logits(x[:, 0])

    def debug_logits(self, ids: list[int], prefill_len: int) -> torch.Tensor:
        """Logits [len(ids), V] computed as generation does: prefill ids[:prefill_len], then one token per
        decode step in slot 0. Tests compare it with the HF forward; not used by generate()."""
        with torch.inference_mode():
            self._ensure_rope(len(ids))
            self._ensure_cache(len(ids), 1)
            kv, first = self._prefill(ids[:prefill_len], all_logits=True)
            self._install(0, kv, prefill_len)
            out = [first]
            for t in range(prefill_len, len(ids)):
                self._tok[0], self._pos[0] = ids[t], t
                out.append(self._decode(1, t + 1))
            return torch.cat(out)
