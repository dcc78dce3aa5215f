"""How samples are drawn, the same in every backend and process: per-sample seeds, drawn response
lengths (rollout.response_length), and inverse-CDF token choice with a top-p nucleus: `draw` for any
batch (data-dependent shapes), `draw_static` for the built-in sampler's static decode step (fixed
shapes, no host sync; the same tokens)."""
from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

import torch

from rlbench.engines.rollout.base import SamplingParams


def sample_seed(seed: int, iteration: int, index: int, j: int) -> int:
    """Stable 63-bit seed of one sample (hashlib, not hash(): the same in every process and run)."""
    digest = hashlib.sha256(f"rlbench-sample:{seed}:{iteration}:{index}:{j}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


RESPONSE_LENGTHS = ("eos", "fixed", "lognormal")
# Partial rollout: after new weights mid-sequence, rebuild the prefix's K/V under them, or keep the
# stale one
RESUME_KV = ("recompute", "keep")


@dataclass
class LengthSampling(SamplingParams):
    """SamplingParams plus the response-length distribution of rollout.response_length.

    eos: a response ends at EOS or max_new_tokens (plain SamplingParams behave the same way).
    fixed: every response is round(mean) tokens; lognormal: log(length) ~ N(log(mean) - sigma^2/2,
    sigma^2), so the mean length is `mean` before clipping to [1, max_new_tokens]. EOS is then
    ignored.
    """

    response_length: str = "eos"
    response_length_mean: float = 64.0
    response_length_sigma: float = 1.0


def target_length(sp: SamplingParams, index: int, j: int) -> int | None:
    """Length of sample j of request `index` when sp draws lengths, else None (stop at EOS).

    Seeded by the sample's own seed through a separate stream (random.Random of a string: sha512,
    the same in every process), so it depends on neither batching nor the token uniforms."""
    mode = getattr(sp, "response_length", "eos")
    if mode == "eos":
        return None
    mean = sp.response_length_mean
    if mode == "lognormal":
        sigma = sp.response_length_sigma
        rng = random.Random(f"rlbench-length:{sample_seed(sp.seed, sp.iteration, index, j)}")
        mean = rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)
    return int(min(max(round(mean), 1), sp.max_new_tokens))


def inverse_cdf(w, u):
    """w [k, n] >= 0 unnormalised weights, u [k] in [0, 1) -> column [k] drawn with P(i) = w[i] /
    sum(w).

    right=True picks the first column whose cdf exceeds u * total, so a zero-weight column never
    wins.
    """
    cdf = w.cumsum(-1)
    return torch.searchsorted(cdf, (u * cdf[:, -1])[:, None],
                              right=True).clamp_max(w.shape[1] - 1)[:, 0]


_NUCLEUS_CANDIDATES = (256, 4096)  # top-k sizes tried before a full sort of the vocabulary


def top_p_sample(p, total, u, top_p: float):
    """p [k, V] unnormalised probabilities, total [k] = p.sum(-1), u [k] -> (tokens [k] inside the
    nucleus, nucleus mass [k] in p's units): the token was drawn with probability p[token] / mass.

    The nucleus: tokens in descending probability while the mass before them is < top_p. It is
    looked for among the top 256, then 4096 tokens; only rows whose nucleus is larger pay for a full
    stable sort (sorting a 50k vocabulary costs more than the forward pass; a trained model's
    nucleus is usually small). Candidates come sorted descending, so their prefix sums are those of
    the full sort.
    """
    V = p.shape[1]
    limit = top_p * total  # [k]
    tok, todo = torch.empty_like(u, dtype=torch.long), torch.arange(len(u), device=p.device)
    mass = torch.empty_like(total)
    for k in [c for c in _NUCLEUS_CANDIDATES if c < V] + [V]:
        rows = p if len(todo) == len(u) else p[todo]
        vals, idx = rows.topk(k, -1) if k < V else rows.sort(dim=-1, descending=True, stable=True)
        cum = vals.cumsum(-1)  # [r, k]
        # nucleus within k
        ok = cum[:, -1] >= limit[todo] if k < V else torch.ones_like(todo, dtype=torch.bool)
        kept = vals * ((cum - vals) < limit[todo, None])
        pick = inverse_cdf(kept, u[todo])
        tok[todo[ok]] = idx.gather(1, pick[:, None])[ok, 0]
        mass[todo[ok]] = kept.sum(-1)[ok]
        todo = todo[~ok]
        if len(todo) == 0:
            break
    return tok, mass


def draw(logits, u, sp: SamplingParams):
    """logits [k, V] fp32, u [k] float64 in [0, 1) -> (tokens [k], behaviour log-probs [k] float64).

    Float64 from here on; every step works row by row, so a row's token depends only on its own
    logits and uniform, not on the rest of the batch. The log-prob is that of the distribution the
    token was drawn from: after temperature and, with top_p < 1, renormalised over the nucleus (as
    vLLM's processed log-probs).
    """
    z = logits.double()
    if sp.greedy:
        tok = z.argmax(-1)
        return tok, z.gather(1, tok[:, None])[:, 0] - torch.logsumexp(z, -1)
    z = z.div_(sp.temperature)
    m = z.max(-1, keepdim=True).values
    p = (z - m).exp_()  # [k, V] unnormalised probabilities: one fewer pass over the vocabulary
    total = p.sum(-1)  # [k]
    if sp.top_p < 1.0:
        tok, total = top_p_sample(p, total, u, sp.top_p)
    else:
        tok = inverse_cdf(p, u)
    return tok, z.gather(1, tok[:, None])[:, 0] - m[:, 0] - total.log()


@dataclass(frozen=True)
class StepMode:
    """What a decode step's sampling depends on besides its tensors; a captured step is kept per
    mode."""

    greedy: bool
    temperature: float
    top_p: float
    eos_stops: bool  # False while lengths come from a distribution (LengthSampling)

    @classmethod
    def of(cls, sp: SamplingParams) -> "StepMode":
        return cls(bool(sp.greedy), float(sp.temperature), float(sp.top_p),
                   getattr(sp, "response_length", "eos") == "eos")


def draw_static(logits, u, mode: StepMode):
    """`draw` with shapes fixed by the batch and vocabulary and no host sync (a CUDA graph can hold
    it): logits [k, V] fp32, u [k] float64 -> (tokens [k], log-probs [k] float64, redraw [k] bool or
    None).

    Greedy and top_p = 1 are `draw`'s own operations. With top_p < 1 only the first candidate set of
    `top_p_sample` (the top 256 tokens) is searched; a row whose nucleus is larger is marked in
    `redraw` and its token must be drawn again by `draw` (outside the step): the tokens are then
    `draw`'s, exactly.
    """
    if mode.greedy or mode.top_p >= 1.0:
        tok, lp = draw(logits, u, mode)
        return tok, lp, None
    z = logits.double().div_(mode.temperature)
    m = z.max(-1, keepdim=True).values
    p = (z - m).exp_()  # [k, V]
    limit = mode.top_p * p.sum(-1)  # [k]
    V = p.shape[1]
    k = _NUCLEUS_CANDIDATES[0]
    vals, idx = p.topk(k, -1) if k < V else p.sort(dim=-1, descending=True, stable=True)
    cum = vals.cumsum(-1)
    redraw = cum[:, -1] < limit if k < V else torch.zeros_like(limit, dtype=torch.bool)
    kept = vals * ((cum - vals) < limit[:, None])
    tok = idx.gather(1, inverse_cdf(kept, u)[:, None])[:, 0]
    return tok, z.gather(1, tok[:, None])[:, 0] - m[:, 0] - kept.sum(-1).log(), redraw
