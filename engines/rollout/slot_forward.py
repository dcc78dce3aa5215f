"""The built-in sampler's forward passes over the HF model's own submodules, with the slot KV cache.

A mixin of BuiltinSampler (engines/rollout/sampler.py), which owns the model, the cache tensors and
the slot state these methods read (`k_cache`, `v_cache` [S, Hkv, Lc, D] per layer; `_tok`, `_pos`
[S]; `_rows`; the RoPE tables `_cos`, `_sin` [Lc, D] and `_arange` [Lc]): prefill of one prompt, the
forward of one decode step over a range of slots, and the logits generation computes (for the tests
against HF's forward).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rlbench.engines.model.compiled import layer_functions


class SlotForward:
    """Prefill and decode with the slot KV cache; the attributes it reads are set by BuiltinSampler.
    Each layer runs engines/model/layers.py's functions around its attention, compiled under
    engine.compile decode (engines/model/compiled.py layer_functions)."""

    def _logits(self, x):
        """Final norm and lm_head; fp32 logits [..., V] (a half-precision head is upcast after the
        matmul)."""
        return self.lm_head(self.norm(x)).float()

    def _make_rope(self, length: int) -> None:
        """cos/sin tables [length, D] from the model's rotary_emb (static RoPE: one row per
        position), and the cache positions `_arange` [length] the decode mask compares with."""
        self._arange = torch.arange(length, device=self.device)
        cos, sin = self.model.model.rotary_emb(torch.zeros(1, dtype=self.dtype, device=self.device),
                                               self._arange[None])
        self._cos, self._sin = cos[0], sin[0]
        self._mask_values = (torch.zeros((), dtype=self.dtype, device=self.device),
                             torch.full((), float("-inf"), dtype=self.dtype, device=self.device))

    # ---------------------------------------------------------------- forward passes

    def _prefill(self, prompt_ids: list[int], all_logits: bool = False):
        """One prompt [P] -> (K/V per layer, each [Hkv, P, D]; logits [V] of the last position, or
        [P, V])."""
        P = len(prompt_ids)
        x = self.embed(torch.tensor([prompt_ids], device=self.device))  # [1, P, hidden]
        cos, sin = self._cos[None, :P], self._sin[None, :P]  # [1, P, D]
        kv = []
        for layer in self.layers:
            attention_inputs, finish = layer_functions(layer)
            # [1, H or Hkv, P, D]
            q, k, v = (t.transpose(1, 2) for t in attention_inputs(layer, x, cos, sin))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                               enable_gqa=True)
            x = finish(layer, x, o.transpose(1, 2).reshape(1, P, -1))  # o [1, H, P, D]
            kv.append((k[0], v[0]))
        return kv, self._logits(x[0] if all_logits else x[0, -1])

    def _step_logits(self, v: dict):
        """Feed each slot of a range its next token at its own position; -> logits [k, V] fp32.

        The decode step's forward (engines/rollout/decode_step.py); v: that range's views
        (`_slot_views`). Writes the new K/V into the cache and attends over the views' cache window
        (the whole cache length Lc, or a prefix of it every slot's position lies in), positions past
        a slot's own masked, so every shape is fixed by the range and the window and nothing is read
        back to the host.
        """
        k, pos = len(v["rows"]), v["pos"]
        x = self.embed(v["tok_col"])  # [k, 1, hidden]
        cos, sin = self._cos[v["pos_col"]], self._sin[v["pos_col"]]  # [k, 1, D]
        # [k, 1, 1, L]: a slot sees its own prefix and token. Additive (0 / -inf) rather than
        # boolean: the same softmax, and CPU SDPA runs ~15% faster with it.
        mask = torch.where(v["positions"] <= pos.view(k, 1, 1, 1), *self._mask_values)
        rep = self.n_heads // self.n_kv
        for layer, kc, vc, (kv, vv) in zip(self.layers, self.k_cache, self.v_cache, v["kv"]):
            attention_inputs, finish = layer_functions(layer)
            q, key, value = attention_inputs(layer, x, cos, sin)  # [k, 1, H or Hkv, D]
            # kc[rows, :, pos] = key[:, 0], as one operator whatever the batch (Python's indexing
            # adds a view when it is 1)
            torch.ops.aten.index_put_(kc, [v["rows"], None, pos], key[:, 0])
            torch.ops.aten.index_put_(vc, [v["rows"], None, pos], value[:, 0])
            # GQA without copying K/V: the H = Hkv * rep query heads of one token become rep queries
            # per kv head (head h uses kv head h // rep, as in HF's repeat_kv).
            q = q.view(k, self.n_kv, rep, self.head_dim)  # [k, Hkv, rep, D]
            o = F.scaled_dot_product_attention(q, kv, vv, attn_mask=mask, scale=self.scale)
            # reshape, not view: a CUDA kernel may return o in another memory order (fp32 on an H200
            # did)
            x = finish(layer, x, o.reshape(k, 1, -1))  # o [k, Hkv, rep, D]
        return self._logits(x[:, 0])

    def _warm(self) -> None:
        """A prefill and a decode step over one slot and over three, once, with the tensors
        generation passes (their shapes, ranks and strides): compiled code compiles here rather than
        in the first steps. What they write into the cache is overwritten before it is read."""
        with torch.inference_mode():
            self._ensure_cache(16, 1)
            self._prefill([0] * 5)
            for b in sorted({1, min(3, self.max_num_seqs)}):
                self._step_logits(self._slot_views(0, b))

    def debug_logits(self, ids: list[int], prefill_len: int) -> torch.Tensor:
        """Logits [len(ids), V] computed as generation does: prefill ids[:prefill_len], then one
        token per decode step in slot 0. Tests compare it with the HF forward; not used by
        generate()."""
        with torch.inference_mode():
            self._ensure_cache(len(ids), 1)
            kv, first = self._prefill(ids[:prefill_len], all_logits=True)
            self._install(0, kv, prefill_len)
            out = [first]
            for t in range(prefill_len, len(ids)):
                self._tok[0], self._pos[0] = ids[t], t
                out.append(self._step_logits(self._slot_views(0, 1)))
            return torch.cat(out)
