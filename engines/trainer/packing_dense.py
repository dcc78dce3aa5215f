"""Shared-prompt packing with dense attention kernels only (engine.shared_prompt_impl=dense; the
other layouts and the log-prob contract: packing.py).

The group is one stream `prompt | resp_1 | ... | resp_G` with every response right-padded to R =
R_max,
L = P + G*R tokens, so the responses are a view [G, R] of the stream: nothing is gathered, scattered
or masked token by token. Per decoder layer (the layer's own modules, engines/model/layers.py):

- the prompt attends causally over its own P tokens, once (SDPA `is_causal`);
- the G responses are a batch: queries [G, H, R, Dh] attend [prompt K/V ; own K/V] ([G, Hkv, P+R,
  Dh]) under a lower-right-aligned causal bias (`causal_lower_right(R, P+R)`: query t sees the P
  prompt keys and its own keys 0..t). On CUDA SDPA runs it in its flash kernel (fp16/bf16) or
  memory-efficient one, with no mask tensor; elsewhere the bias becomes one [R, P+R] mask, shared by
  the G rows. No L x L mask exists anywhere.

The prompt's K/V enter the G rows through `expand`, whose backward sums the G rows' gradients into
the one prompt, as the G unpacked rows would each add their own. Padding: a padded slot sits after
every real key of its row, so the causal bias keeps it from every real query; its outputs and
log-probs are dropped. The linear layers run on the padded stream (G*R_max response tokens, as the
unpacked rows pad to R_max).

Cost per layer: linear layers on P + G*R tokens; attention P^2/2 for the prompt, G*R*(P+R/2) for the
responses; one copy of the prompt's K/V per response row (the concatenation).
"""
from __future__ import annotations

import torch
from torch.nn.attention.bias import causal_lower_right

from rlbench.engines.model import layers
from rlbench.engines.trainer.chosen_logprobs import chosen_logprobs
from rlbench.engines.trainer.packing import run_decoder, sdpa


def packed_logprobs_dense(model, prompt_ids: list[int], responses: list[list[int]],
                          temperature: float = 1.0) -> list[torch.Tensor]:
    """Shared-prompt packed log-probs with dense attention kernels -> G tensors [R_i]
    (`logp[i][t] = log p(resp_i[t] | prompt, resp_i[:t])`, with grad when grad is enabled)."""
    layers.check_supported(model)
    P, lengths = len(prompt_ids), [len(r) for r in responses]
    if P < 1 or not lengths or min(lengths) < 1:
        raise ValueError(f"need a non-empty prompt and G>=1 non-empty responses, got P={P}, "
                         f"lengths={lengths}")
    G, R = len(lengths), max(lengths)
    stream = _stream(prompt_ids, responses, R).to(model.device)  # [2, L]: token ids, position ids
    # one object for every layer: it holds two lengths, no tensor
    bias = causal_lower_right(R, P + R)
    h = run_decoder(model, stream[0], stream[1], lambda attn, q, k,
                    v: _attention(attn, q, k, v, bias, P, G, R))
    D = h.shape[-1]
    # resp_i[0] is predicted by the prompt's last position (shared: expand sums its G gradients),
    # resp_i[t] by resp_i[t-1]; the norm is per token, so only the predicting positions are
    # normalised. split, not slicing: a slice's backward zero-fills a tensor the size of its source
    # and copies into it. [P, D], [G*R, D]
    hp, hr = h.split([P, G * R])
    rows = hr.view(G, R, D).split([R - 1, 1], dim=1)[0]                                # [G, R-1, D]
    pred = torch.cat([hp[P - 1:].expand(G, 1, D), rows], dim=1)                        # [G, R, D]
    # the responses, padded
    targets = stream[0, P:].view(G, R)
    # [.., D] -> [.., V]
    head = lambda x: model.lm_head(model.model.norm(x))  # noqa: E731
    # [G, R]
    picked = chosen_logprobs(head, pred, targets, temperature, model.lm_head.weight.shape[0])
    return [picked[i, :n] for i, n in enumerate(lengths)]


def _stream(prompt_ids: list[int], responses: list[list[int]], R: int) -> torch.Tensor:
    """[2, P + G*R] long: the token ids (responses right-padded with id 0) and the position ids
    (0..P-1, then P..P+R-1 for every response). Built on the host and moved in one copy."""
    P = len(prompt_ids)
    ids = list(prompt_ids)
    for r in responses:
        ids += r + [0] * (R - len(r))
    positions = list(range(P)) + list(range(P, P + R)) * len(responses)
    return torch.tensor([ids, positions], dtype=torch.long)


def _attention(attn, q, k, v, bias, P: int, G: int, R: int) -> torch.Tensor:
    """q [L, H, Dh], k/v [L, Hkv, Dh] of the padded stream -> attention output [L, H*Dh]."""
    # split into prompt and responses (views; split's backward is one concatenation, where slicing's
    # would zero-fill a gradient the size of the stream per slice and add them up)
    (qp, qr), (kp, kr), (vp, vr) = (t.split([P, G * R]) for t in (q, k, v))
    # [1, h, P, Dh]
    prompt = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731
    # [G, h, R, Dh]
    rows = lambda t: t.view(G, R, *t.shape[1:]).transpose(1, 2)  # noqa: E731
    kp, vp = prompt(kp), prompt(vp)
    out_p = sdpa(attn, prompt(qp), kp, vp, is_causal=True)                    # [1, H, P, Dh]
    kr = torch.cat([kp.expand(G, -1, -1, -1), rows(kr)], dim=2)               # [G, Hkv, P+R, Dh]
    vr = torch.cat([vp.expand(G, -1, -1, -1), rows(vr)], dim=2)               # [G, Hkv, P+R, Dh]
    out_r = sdpa(attn, rows(qr), kr, vr, attn_mask=bias)                      # [G, H, R, Dh]
    return torch.cat([out_p[0].transpose(0, 1).reshape(P, -1),                # [P, H*Dh]
                      out_r.transpose(1, 2).reshape(G * R, -1)])              # [G*R, H*Dh]
