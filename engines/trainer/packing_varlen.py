"""Several sequences in one stream without padding (train.micro_batch_tokens; the micro-batches:
micro_batch.py), as VERL's use_remove_padding: the linear layers run on exactly the stream's tokens.

The stream is documents one after another. A document is a prompt and its responses: one response
(the unpacked row `prompt + response`), or several sharing the prompt (the shared-prompt layout of
packing.py, `prompt | resp_1 | ... | resp_k`). Position ids restart at 0 in every document (and at P
for every
response of a shared one); a query sees a key iff both are in the same document, the key is not
after the query, and the key is in the prompt or in the query's own response. Attention:

- CUDA: FlexAttention with that rule as a block mask (compiled; blocks no query may see are
  skipped);
- elsewhere (FlexAttention has no backward on the CPU): attention per document on its slice of the
  stream, causal SDPA for one response, the shared-prompt layout's for a group (packing.py
  `group_attention`: the prompt once, the responses attending [prompt K/V; own K/V]); the linear
  layers still run once on the whole stream. One block-diagonal [L, L] mask over the stream
  (additive: a 0/1 mask added to the scores would mask nothing) gives the same values at a cost
  quadratic in the budget: it took 2.7x the update's time at 2048 tokens on the CPU default
  (docs/results/token-budget.md).

`varlen_logprobs` returns, per response of the documents in order, its tokens' log-probs [R_i] (with
grad when grad is enabled), the same values as `packing.unpacked_logprobs` of each row.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch.nn.attention.flex_attention import create_block_mask

from rlbench.core.devices import device as dev
from rlbench.engines.model import layers
from rlbench.engines.trainer.chosen_logprobs import chosen_logprobs
from rlbench.engines.trainer.packing import flex_kernel, group_attention, run_decoder, sdpa


@dataclass(frozen=True)
class Document:
    """One prompt and the responses that attend to it."""

    prompt_ids: list[int]
    responses: list[list[int]]

    @property
    def tokens(self) -> int:
        return len(self.prompt_ids) + sum(len(r) for r in self.responses)


def stream(docs: list[Document]) -> dict[str, torch.Tensor]:
    """The stream's index tensors, built on the host: input_ids, position_ids, doc, seg [L] (seg: 0
    for a prompt token, i+1 for a token of its document's response i); pred [N]: the stream position
    whose logits predict each response token (a response's first token: its prompt's last position);
    targets [N]."""
    ids, pos, doc, seg, pred = [], [], [], [], []
    for d, document in enumerate(docs):
        P, base = len(document.prompt_ids), len(ids)
        ids += document.prompt_ids
        pos += range(P)
        doc += [d] * P
        seg += [0] * P
        for i, r in enumerate(document.responses):
            at = len(ids)
            pred += [base + P - 1] + list(range(at, at + len(r) - 1))
            ids += r
            pos += range(P, P + len(r))
            doc += [d] * len(r)
            seg += [i + 1] * len(r)
    long = partial(torch.tensor, dtype=torch.long)
    targets = [t for document in docs for r in document.responses for t in r]
    return dict(input_ids=long(ids), position_ids=long(pos), doc=long(doc), seg=long(seg),
                pred=long(pred),
                targets=long(targets))


def allowed(doc: torch.Tensor, seg: torch.Tensor, q, kv):
    """Whether query q may see key kv (broadcasting index tensors)."""
    return (kv <= q) & (doc[kv] == doc[q]) & ((seg[kv] == 0) | (seg[kv] == seg[q]))


def _document_attention(attn, q, k, v, sizes: list[int], attends: list) -> torch.Tensor:
    """q [L, H, Dh], k/v [L, Hkv, Dh] -> [L, H*Dh], each document on its own slice of the stream:
    causal SDPA for one response (attends[i] None), the shared-prompt layout's attention for a group
    (packing.group_attention). The cost follows the documents' own lengths, not the stream's (one
    [L, L] mask over the stream would make it quadratic in the budget)."""
    # [T, h, Dh] -> [1, h, T, Dh]
    heads_first = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731
    outs = []
    for qd, kd, vd, attend in zip(q.split(sizes), k.split(sizes), v.split(sizes), attends):
        if attend is not None:
            outs.append(attend(attn, qd, kd, vd))                                     # [T, H*Dh]
            continue
        # [1, H, T, Dh]
        o = sdpa(attn, heads_first(qd), heads_first(kd), heads_first(vd), is_causal=True)
        outs.append(o[0].transpose(0, 1).reshape(qd.shape[0], -1))
    return torch.cat(outs)


def _flex_attention(attn, q, k, v, block_mask) -> torch.Tensor:
    # [L, h, Dh] -> [1, h, L, Dh]
    heads_first = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731
    out = flex_kernel(q.device.type)(heads_first(q), heads_first(k), heads_first(v),
                                     block_mask=block_mask,
                               # [1, H, L, Dh]
                               scale=attn.scaling, enable_gqa=q.shape[1] != k.shape[1])
    return out[0].transpose(0, 1).reshape(q.shape[0], -1)


def attention_for(model, docs: list[Document], doc: torch.Tensor, seg: torch.Tensor):
    """attend(attn, q, k, v) -> [L, H*Dh] for this stream on the model's device."""
    if dev.flex_attention_trains(model.device.type):
        L = doc.numel()
        block = create_block_mask(lambda b, h, q, kv: allowed(doc, seg, q, kv), None, None, L, L,
                                  device=doc.device)
        return partial(_flex_attention, block_mask=block)
    attends = [None if len(d.responses) == 1 else group_attention(d.prompt_ids, d.responses,
                                                                  doc.device)
               for d in docs]
    return partial(_document_attention, sizes=[d.tokens for d in docs], attends=attends)


def varlen_logprobs(model, docs: list[Document], temperature: float = 1.0) -> list[torch.Tensor]:
    """The documents as one stream through the model -> per response, in order, its log-probs
    [R_i]."""
    layers.check_supported(model)
    s = {k: v.to(model.device) for k, v in stream(docs).items()}
    attend = attention_for(model, docs, s["doc"], s["seg"])
    # [L, D]
    h = run_decoder(model, s["input_ids"], s["position_ids"], attend)
    # [N]
    picked = _chosen_logprobs(model, h[s["pred"]], s["targets"], temperature)
    return list(picked.split([len(r) for d in docs for r in d.responses]))


def _chosen_logprobs(model, hidden: torch.Tensor, targets: torch.Tensor,
                     temperature: float) -> torch.Tensor:
    """hidden [N, D] at the predicting positions (before the final norm), targets [N] -> the chosen
    tokens' log-probs [N], the log-softmax in fp32 (in bf16 a likely token's log-prob loses most of
    its digits)."""
    # [n, V]; the norm is per token: the N positions only
    head = lambda h: model.lm_head(model.model.norm(h))
    # in slices
    return chosen_logprobs(head, hidden, targets, temperature, model.lm_head.weight.shape[0])
