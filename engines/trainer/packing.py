"""Shared-prompt packing for the trainer (docs/architecture/schedules.md, 'Shared-prompt
attention').

A GRPO group is one prompt (P tokens) and G responses (R_1..R_G tokens). The
unpacked trainer runs G rows of `prompt + response_i`; packed, the group is
one sequence `prompt | resp_1 | ... | resp_G` in which a response token sees
the prompt and its own earlier tokens only, and position ids restart at P for
every response. Tokens drop from G*(P+R) to P + sum(R_i); the response
log-probs are the same.

Three ways to get the log-probs of the response tokens, all returning G 1-D
tensors (`logp[i][t] = log p(resp_i[t] | prompt, resp_i[:t])`, one per
response, with grad when grad is enabled):

- `unpacked_logprobs`      the reference: G right-padded rows, 2D padding mask.
- `packed_logprobs`        the goal: runs the HF decoder layers itself on the
                           packed token stream and never builds an L x L mask;
                           the prompt is attended once (causal over P), the
                           responses as a batch [G, R_max] whose queries see
                           [shared prompt K/V | own causal K/V], O(G*R*(P+R)).
- `packed_logprobs_flex`   the same packed stream with FlexAttention and a block
                           mask (CUDA: compiled, with a backward; CPU: forward only).
- `packed_logprobs_mask4d` the simple one: HF forward on the packed sequence
                           with an explicit [1, 1, L, L] mask, O((P+sum R)^2).

The first response token is predicted by the prompt's last position, which is
shared: its hidden state is used G times (once per response), so its gradient
is the sum over the G responses, as in the unpacked rows.

Works for Llama-style decoders (Llama, Qwen2, Qwen3: q/k/v/o projections with
or without bias, GQA, optional q_norm/k_norm, RoPE, full attention).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils.checkpoint import checkpoint

from rlbench.engines.model import layers
from rlbench.engines.model.compiled import layer_functions
from rlbench.engines.trainer.chosen_logprobs import chosen_logprobs


def group_token_counts(P: int, lengths: list[int], padded: bool = True) -> tuple[int, int]:
    """(unpacked, packed) tokens of one group.

    unpacked = G*(P+R_max) when rows are right-padded (what the trainer computes),
    or sum(P+R_i) without padding; packed = P + sum(R_i).
    """
    G = len(lengths)
    unpacked = G * (P + max(lengths)) if padded else sum(P + r for r in lengths)
    return unpacked, P + sum(lengths)


def theoretical_speedup(P: int, R: int, G: int) -> float:
    """Token ratio G*(P+R) / (P+G*R): the speedup if cost were linear in tokens."""
    return G * (P + R) / (P + G * R)


# ----------------------------------------------------------------- layout


@dataclass(frozen=True)
class _Layout:
    """Index tensors of the packed stream `prompt | resp_1 | ... | resp_G` (L = P + N tokens)."""

    P: int
    lengths: list[int]
    input_ids: torch.Tensor     # [L]        prompt then every response, no padding
    position_ids: torch.Tensor  # [L]        0..P-1, then P..P+R_i-1 for each response
    segment_ids: torch.Tensor   # [L]        0 for the prompt, i+1 for response i
    pad_index: torch.Tensor     # [G, R_max] response slot -> index into the N response tokens
    valid_index: torch.Tensor   # [N]        flat [G*R_max] slot of every response token
    # [N]        stream position whose logits predict each response token
    pred_index: torch.Tensor
    targets: torch.Tensor       # [N]        the response tokens


def _layout(prompt_ids: list[int], responses: list[list[int]], device) -> _Layout:
    P, lengths = len(prompt_ids), [len(r) for r in responses]
    if P < 1 or not lengths or min(lengths) < 1:
        raise ValueError(f"need a non-empty prompt and G>=1 non-empty responses, got P={P}, "
                         f"lengths={lengths}")
    # Built on the host and moved once: a few dozen tiny kernels (and nonzero's sync) on a GPU cost
    # more.
    G, R_max, lens = len(lengths), max(lengths), torch.tensor(lengths)
    # [G] offset of each response in N
    starts = torch.tensor([0] + lengths[:-1]).cumsum(0)
    t = torch.arange(R_max)                                         # [R_max]
    valid = t[None, :] < lens[:, None]                              # [G, R_max]
    # Padded slots point at token 0: their outputs are dropped, and causality keeps
    # them out of every real query (a padded key sits after all real keys of its row).
    pad_index = torch.where(valid, starts[:, None] + t[None, :], 0)
    resp_pos = torch.cat([torch.arange(r) for r in lengths])       # [N] t within its response
    resp_flat = P + starts.repeat_interleave(lens) + resp_pos       # [N] stream index
    # resp_i[0] is predicted by the last prompt token (shared by all G), resp_i[t] by resp_i[t-1].
    pred_index = torch.where(resp_pos == 0, P - 1, resp_flat - 1)
    targets = torch.tensor([tok for r in responses for tok in r], dtype=torch.long)
    tensors = dict(
        input_ids=torch.cat([torch.tensor(prompt_ids, dtype=torch.long), targets]),
        position_ids=torch.cat([torch.arange(P), P + resp_pos]),
        segment_ids=torch.cat([torch.zeros(P, dtype=torch.long),
                               torch.arange(1, G + 1).repeat_interleave(lens)]),
        pad_index=pad_index,
        valid_index=valid.flatten().nonzero().squeeze(1),
        pred_index=pred_index,
        targets=targets,
    )
    return _Layout(P=P, lengths=lengths, **{k: v.to(device) for k, v in tensors.items()})


def _token_logprobs(model, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                    lengths: list[int], norm: bool = False) -> list[torch.Tensor]:
    """hidden [N, D] at the predicting positions (before the final norm where `norm`), targets [N]
    -> G tensors [R_i]; the LM head and log-softmax in slices
    (engines/trainer/chosen_logprobs.py)."""
    head = (lambda h: model.lm_head(model.model.norm(h))) if norm else model.lm_head  # noqa: E731
    # [N]
    picked = chosen_logprobs(head, hidden, targets, temperature, model.lm_head.weight.shape[0])
    return list(picked.split(lengths))


# ----------------------------------------------------------------- reference


def unpacked_logprobs(model, prompt_ids: list[int], responses: list[list[int]],
                      temperature: float = 1.0) -> list[torch.Tensor]:
    """Reference: G right-padded rows `prompt + resp_i` through the HF model -> G tensors [R_i]."""
    lengths, P = [len(r) for r in responses], len(prompt_ids)
    G, R_max = len(responses), max(lengths)
    ids = torch.zeros(G, P + R_max, dtype=torch.long)   # [G, P+R_max], pad id 0 (masked out)
    mask = torch.zeros_like(ids)                         # [G, P+R_max]
    for i, r in enumerate(responses):
        ids[i, : P + len(r)] = torch.tensor(prompt_ids + r)
        mask[i, : P + len(r)] = 1
    valid = mask[:, P:].bool()                           # [G, R_max] real response tokens
    targets = ids[:, P:][valid]                          # [N]
    ids, mask, valid, targets = (x.to(model.device) for x in (ids, mask, valid, targets))
    # Only positions P-1 .. P+R_max-2 predict response tokens, and only the valid ones go through
    # the LM head, as one [N, D] matrix: HF's forward (logits_to_keep) hands the head a [G, R, D]
    # slice that is not contiguous, and torch.matmul then folds it into one matrix product only
    # where the head's weight requires grad; for the reference model (whose weights do not) it runs
    # a batched product over the weight copied G times: on the CPU at the Qwen2.5-0.5B shape (a
    # [151,936 x 896] head) that copy took 2.6x the policy's whole pass
    # (docs/results/logprob-memory.md, 'The reference pass'). use_cache=False: HF's default
    # (config.use_cache) builds a K/V cache in every forward, a copy per layer that no log-prob pass
    # reads. [G, P+R_max, D]
    hidden = model.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    return _token_logprobs(model, hidden[:, -(R_max + 1):-1][valid], targets, temperature, lengths)


# ----------------------------------------------------------------- packed, 4D mask (option A)


def _packed_mask(layout: _Layout, attn_implementation: str, dtype: torch.dtype) -> torch.Tensor:
    """[1, 1, L, L] mask: query q sees key k iff k <= q and k is in the prompt or in q's
    response."""
    seg = layout.segment_ids
    L = seg.numel()
    causal = torch.ones(L, L, dtype=torch.bool, device=seg.device).tril()  # [L, L]
    allowed = causal & ((seg[None, :] == 0) | (seg[None, :] == seg[:, None]))
    if attn_implementation == "sdpa":
        return allowed[None, None]  # SDPA reads bool masks as True = attend
    if attn_implementation == "eager":
        # eager *adds* the mask to the scores: a bool mask would add 0/1 and mask nothing.
        zero = torch.zeros((), dtype=dtype, device=seg.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)[None, None]
    raise NotImplementedError(
        f"packed_logprobs_mask4d supports attn_implementation 'sdpa' or 'eager', not "
        f"{attn_implementation!r}; "
        "use packed_logprobs, which does not depend on it")


def packed_logprobs_mask4d(model, prompt_ids: list[int], responses: list[list[int]],
                           temperature: float = 1.0) -> list[torch.Tensor]:
    """Packed group through the HF forward with an explicit L x L mask -> G tensors [R_i]."""
    layout = _layout(prompt_ids, responses, model.device)
    mask = _packed_mask(layout, model.config._attn_implementation, model.dtype)  # [1, 1, L, L]
    hidden = model.model(input_ids=layout.input_ids[None], attention_mask=mask,
                         # [L, D]
                         position_ids=layout.position_ids[None],
                         use_cache=False).last_hidden_state[0]
    return _token_logprobs(model, hidden[layout.pred_index], layout.targets, temperature,
                           layout.lengths)


# ----------------------------------------------------------------- packed, shared prompt (option B)


def sdpa(attn, q, k, v, **kw) -> torch.Tensor:
    """SDPA with the attention module's scale and dropout: q [B, H, T, Dh], k/v [B, Hkv, S, Dh] ->
    [B, H, T, Dh]."""
    dropout = attn.attention_dropout if attn.training else 0.0
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=attn.scaling,
                                          enable_gqa=q.shape[1] != k.shape[1], **kw)


def _shared_prompt_attention(attn, q, k, v, layout: _Layout,
                             resp_mask: torch.Tensor) -> torch.Tensor:
    """q [L, H, Dh], k/v [L, Hkv, Dh] of the packed stream -> attention output [L, H*Dh]."""
    P, (G, R) = layout.P, layout.pad_index.shape
    # [T, h, Dh] -> [1, h, T, Dh]
    heads_first = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731
    qp, kp, vp = heads_first(q[:P]), heads_first(k[:P]), heads_first(v[:P])  # [1, h, P, Dh]
    out_p = sdpa(attn, qp, kp, vp, is_causal=True)                           # [1, H, P, Dh]
    # Responses as a right-padded batch for attention only: the linear layers run on the
    # unpadded stream, so unequal lengths cost padding here and nowhere else.
    # [N, h, Dh] -> [G, h, R, Dh]
    pad = lambda t: t[P:][layout.pad_index].transpose(1, 2)  # noqa: E731
    # The prompt K/V are broadcast, not recomputed: expand's backward sums the G gradients
    # into the one prompt, exactly as the G unpacked rows would (each with its own copy).
    kr = torch.cat([kp.expand(G, -1, -1, -1), pad(k)], dim=2)  # [G, Hkv, P+R, Dh]
    vr = torch.cat([vp.expand(G, -1, -1, -1), pad(v)], dim=2)  # [G, Hkv, P+R, Dh]
    out_r = sdpa(attn, pad(q), kr, vr, attn_mask=resp_mask)    # [G, H, R, Dh]
    out_p = out_p[0].transpose(0, 1).reshape(P, -1)                              # [P, H*Dh]
    out_r = out_r.transpose(1, 2).reshape(G * R, -1)[layout.valid_index]         # [N, H*Dh]
    return torch.cat([out_p, out_r])                                             # [L, H*Dh]


def _flex_attention(attn, q, k, v, block_mask) -> torch.Tensor:
    """FlexAttention over the whole packed stream: q [L, H, Dh], k/v [L, Hkv, Dh] -> [L, H*Dh].

    The block mask skips every key block no query of a block may see, so the cost follows the
    allowed pairs (prompt causal + each response over prompt and itself), not L x L."""
    # [L, h, Dh] -> [1, h, L, Dh]
    heads_first = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731
    out = flex_kernel(q.device.type)(heads_first(q), heads_first(k), heads_first(v),
                                     block_mask=block_mask,
                                     # [1, H, L, Dh]
                                     scale=attn.scaling, enable_gqa=q.shape[1] != k.shape[1])
    return out[0].transpose(0, 1).reshape(q.shape[0], -1)


_FLEX = {}


def flex_kernel(device_type: str):
    """flex_attention, compiled once per process on CUDA (uncompiled it materialises the scores; on
    CPU, where there is no backward anyway, it runs uncompiled for tests)."""
    if device_type != "cuda":
        return flex_attention
    if "fn" not in _FLEX:
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=True)
    return _FLEX["fn"]


def _flex_block_mask(layout: _Layout):
    seg, L = layout.segment_ids, layout.segment_ids.numel()

    def allowed(b, h, q, kv):  # causal, and the key is in the prompt or in the query's own response
        return (kv <= q) & ((seg[kv] == 0) | (seg[kv] == seg[q]))
    return create_block_mask(allowed, None, None, L, L, device=seg.device)


def _decoder_layer(layer, h, cos, sin, attend) -> torch.Tensor:
    """One pre-norm decoder layer on the packed stream h [L, D] (engines/model/layers.py).
    attend(attn, q, k, v) -> [L, H*Dh] is the packed attention."""
    attention_inputs, finish = layer_functions(layer)  # compiled under engine.compile train
    q, k, v = attention_inputs(layer, h, cos, sin)  # q [L, H, Dh], k/v [L, Hkv, Dh]
    return finish(layer, h, attend(layer.self_attn, q, k, v))


def _run_layer(layer, *args) -> torch.Tensor:
    """_decoder_layer, under activation checkpointing when the model has it enabled.

    We bypass the layer's forward, which is where HF applies checkpointing, so apply it
    here with the function (and its kwargs, CPU offload) that the model set up.
    """
    if getattr(layer, "gradient_checkpointing", False) and layer.training:
        checkpointed = getattr(layer, "_gradient_checkpointing_func",
                               partial(checkpoint, use_reentrant=False))
        return checkpointed(_decoder_layer, layer, *args)
    return _decoder_layer(layer, *args)


def _response_mask(P: int, R: int, device) -> torch.Tensor:
    """[R, P+R] bool, True = attend: response query t sees the whole prompt and its own keys 0..t.

    The same for all G responses (padding sits after the real tokens), so it broadcasts.
    """
    prompt = torch.ones(R, P, dtype=torch.bool, device=device)
    own = torch.ones(R, R, dtype=torch.bool, device=device).tril()
    return torch.cat([prompt, own], dim=1)


def packed_logprobs(model, prompt_ids: list[int], responses: list[list[int]],
                    temperature: float = 1.0) -> list[torch.Tensor]:
    """Shared-prompt packed log-probs without an L x L mask -> G tensors [R_i].

    Cost per layer: linear layers on P + sum(R_i) tokens; attention P^2/2 for the
    prompt plus G*R_max*(P+R_max) for the responses.
    """
    layers.check_supported(model)
    layout = _layout(prompt_ids, responses, model.device)
    resp_mask = _response_mask(layout.P, layout.pad_index.shape[1], model.device)  # [R, P+R]
    return _packed(model, layout, temperature,
                   partial(_shared_prompt_attention, layout=layout, resp_mask=resp_mask))


def group_attention(prompt_ids: list[int], responses: list[list[int]], device):
    """attend(attn, q, k, v) -> [L, H*Dh] over one group's unpadded stream `prompt | resp_1 | ... |
    resp_G`
    (L = P + sum R_i): packed_logprobs's attention, for a stream that holds the group among others
    (packing_varlen.py, train.micro_batch_tokens)."""
    layout = _layout(prompt_ids, responses, device)
    resp_mask = _response_mask(layout.P, layout.pad_index.shape[1], device)  # [R, P+R]
    return partial(_shared_prompt_attention, layout=layout, resp_mask=resp_mask)


def packed_logprobs_flex(model, prompt_ids: list[int], responses: list[list[int]],
                         temperature: float = 1.0) -> list[torch.Tensor]:
    """Shared-prompt packed log-probs with FlexAttention and a block mask -> G tensors [R_i].

    The fastest exact layout on CUDA, where FlexAttention has a backward; on CPU it has none."""
    layers.check_supported(model)
    layout = _layout(prompt_ids, responses, model.device)
    block_mask = _flex_block_mask(layout)
    return _packed(model, layout, temperature, partial(_flex_attention, block_mask=block_mask))


def _packed(model, layout: _Layout, temperature: float, attend) -> list[torch.Tensor]:
    """The decoder layers on the packed stream with the given attention -> G tensors [R_i]."""
    h = run_decoder(model, layout.input_ids, layout.position_ids, attend)     # [L, D]
    # The final norm is per token: normalise only the N positions that predict a token.
    return _token_logprobs(model, h[layout.pred_index], layout.targets, temperature, layout.lengths,
                           norm=True)


def run_decoder(model, input_ids: torch.Tensor, position_ids: torch.Tensor, attend) -> torch.Tensor:
    """Embedding and every decoder layer over one packed stream: input_ids, position_ids [L] ->
    hidden states [L, D] before the final norm. attend(attn, q, k, v) -> [L, H*Dh] is the packed
    attention."""
    base = model.model
    h = base.embed_tokens(input_ids)                                           # [L, D]
    cos, sin = base.rotary_emb(h[None], position_ids[None])                    # [1, L, Dh] each
    cos, sin = cos[0], sin[0]                                                  # [L, Dh]
    for layer in base.layers[: model.config.num_hidden_layers]:
        h = _run_layer(layer, h, cos, sin, attend)                             # [L, D]
    return h
