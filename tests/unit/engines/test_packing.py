"""Shared-prompt packing: packed == unpacked log-probs and gradients, for every layout that trains on CPU
(dense, gather, mask4d; docs/architecture/schedules.md, 'Shared-prompt attention', and docs/architecture/tests.md).

Tolerances (fp32 everywhere):
- log-probs: atol 2e-5. The paths sum the same products in a different order
  (other matmul shapes, SDPA vs eager kernels, G rows vs one shared prompt), so
  each op differs by a few ulp (~1e-7 relative), and log-probs here reach ~10 in
  magnitude (temperature down to 0.5). Measured over 60 random groups: <= 7e-6;
  2e-5 leaves 3x. A wrong mask, position id or predicting position moves them
  by 1e-1 to 10 with these weights (see _model), so the tolerance hides no bug.
- gradients: rtol 1e-4, atol 1e-5 x the largest entry of that parameter's
  gradient. Packing sums the G responses' contributions to the prompt inside one
  kernel (expand's backward) instead of over G rows, and the rounding compounds
  through two layers' backward; measured <= 4e-6 of the largest entry.
"""
from __future__ import annotations

import functools

import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlbench.engines.trainer.packing import (
    group_token_counts,
    packed_logprobs,
    packed_logprobs_mask4d,
    theoretical_speedup,
    unpacked_logprobs,
)
from rlbench.engines.trainer.packing_dense import packed_logprobs_dense

VOCAB = 64
LOGP_ATOL = 2e-5
# fp32 summation order (packed attention sums the keys in another order): a few ulps of the value, which for a
# log-prob near -8 is past LOGP_ATOL alone (hypothesis found 2.1e-5 at a relative 2.5e-6)
LOGP_RTOL = 4e-6
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-5
FAMILIES = {
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),  # q_norm / k_norm
}
CASES = [(f, impl) for f in ("qwen2", "llama") for impl in ("sdpa", "eager")] + [("qwen3", "sdpa")]
PACKED = {"dense": packed_logprobs_dense, "gather": packed_logprobs, "mask4d": packed_logprobs_mask4d}


pytestmark = pytest.mark.usefixtures("one_thread")


@functools.lru_cache(maxsize=None)
def _model(family: str, attn: str, seed: int = 0):
    """Small random GQA model (4 heads, 2 KV heads), fp32, eval, no dropout.

    HF's init (std 0.02, zero biases, unit norms) gives near-uniform logits where a
    masking bug moves log-probs by ~1e-3 and zero biases hide a dropped bias term, so
    weights get std 0.2 and biases and norm weights are randomised too.
    """
    config_cls, model_cls = FAMILIES[family]
    config = config_cls(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.0,
                        max_position_embeddings=256, attn_implementation=attn)
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.2)
    return model


def _group(seed: int, P: int, lengths: list[int]):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, VOCAB, (P,), generator=g).tolist()
    return prompt, [torch.randint(0, VOCAB, (r,), generator=g).tolist() for r in lengths]


def _assert_logprobs_equal(model, packed, prompt, responses, temperature=1.0):
    ref = unpacked_logprobs(model, prompt, responses, temperature)
    got = packed(model, prompt, responses, temperature)
    assert [t.shape for t in got] == [(len(r),) for r in responses]
    for i, (a, b) in enumerate(zip(ref, got)):
        torch.testing.assert_close(b, a, atol=LOGP_ATOL, rtol=LOGP_RTOL, msg=lambda m: f"response {i}: {m}")


def _grads(model, fn, prompt, responses, weights, temperature=1.0) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    logps = fn(model, prompt, responses, temperature)
    sum(torch.dot(lp, w) for lp, w in zip(logps, weights)).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_grads_equal(model, packed, prompt, responses, temperature=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    weights = [torch.randn(len(r), generator=g) for r in responses]  # like per-token advantages
    ref = _grads(model, unpacked_logprobs, prompt, responses, weights, temperature)
    got = _grads(model, packed, prompt, responses, weights, temperature)
    assert got.keys() == ref.keys() and len(ref) == len(list(model.parameters()))
    for name, a in ref.items():
        scale = a.abs().max().clamp_min(1.0)
        torch.testing.assert_close(got[name], a, rtol=GRAD_RTOL, atol=GRAD_ATOL * scale.item(), msg=name)


# ----------------------------------------------------------------- fixed cases


@pytest.mark.parametrize("packed", PACKED.values(), ids=PACKED.keys())
@pytest.mark.parametrize("family,attn", CASES)
def test_packed_equals_unpacked(family, attn, packed):
    prompt, responses = _group(0, 13, [7, 1, 12, 4])
    _assert_logprobs_equal(_model(family, attn), packed, prompt, responses, temperature=0.7)


@pytest.mark.parametrize("packed", PACKED.values(), ids=PACKED.keys())
@pytest.mark.parametrize("family,attn", CASES)
def test_packed_gradients_equal_unpacked(family, attn, packed):
    prompt, responses = _group(1, 9, [5, 11, 2])
    _assert_grads_equal(_model(family, attn), packed, prompt, responses, temperature=1.3)


@pytest.mark.parametrize("packed", PACKED.values(), ids=PACKED.keys())
@pytest.mark.parametrize("P,lengths", [(5, [6]), (1, [4]), (1, [1]), (8, [1, 1, 1]), (6, [1, 9]), (3, [5, 5])],
                         ids=["G=1", "P=1", "P=1,R=1", "all-R=1", "one-R=1", "equal-R"])
def test_edge_cases(P, lengths, packed):
    prompt, responses = _group(2, P, lengths)
    model = _model("qwen2", "sdpa")
    _assert_logprobs_equal(model, packed, prompt, responses)
    _assert_grads_equal(model, packed, prompt, responses)


@pytest.mark.parametrize("packed", [packed_logprobs_dense, packed_logprobs], ids=["dense", "gather"])
def test_gradient_checkpointing_gives_the_same_gradients(packed):
    """The shared-prompt paths run the layers themselves, so they must apply checkpointing themselves."""
    model = _model("qwen2", "sdpa", seed=1)  # used by this test only: the shared ones stay in eval mode
    prompt, responses = _group(5, 7, [4, 9])
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    model.train()  # checkpointing is active in training mode only; dropout is 0
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    calls = []
    for layer in model.model.layers:  # count the recomputations: checkpointing must really happen
        func = layer._gradient_checkpointing_func
        layer._gradient_checkpointing_func = lambda *a, _f=func, **k: calls.append(1) or _f(*a, **k)
    _assert_grads_equal(model, packed, prompt, responses)
    assert len(calls) >= 2 * len(model.model.layers)  # unpacked and packed each checkpoint every layer


@pytest.mark.parametrize("packed", PACKED.values(), ids=PACKED.keys())
def test_response_sees_only_prompt_and_itself(packed):
    """Changing one response must not change any other response's log-probs."""
    model = _model("llama", "sdpa")
    prompt, responses = _group(3, 6, [5, 7, 4])
    before = packed(model, prompt, responses)
    changed = [responses[0], [(t + 1) % VOCAB for t in responses[1]], responses[2]]
    after = packed(model, prompt, changed)
    torch.testing.assert_close(after[0], before[0], atol=LOGP_ATOL, rtol=0)
    torch.testing.assert_close(after[2], before[2], atol=LOGP_ATOL, rtol=0)
    assert (after[1] - before[1]).abs().max() > 1e-2


def test_dense_builds_no_stream_sized_mask(monkeypatch):
    """dense: no tensor of the forward or the backward is L x L (L = P + G*R_max, the packed stream)."""
    from torch.nn.attention.bias import causal_lower_right
    from torch.utils._python_dispatch import TorchDispatchMode

    import rlbench.engines.trainer.packing_dense as dense

    P, lengths = 40, [30, 1, 25, 12]
    L = P + len(lengths) * max(lengths)  # 160: no dimension of the model has this size
    # CausalBias (a tensor subclass) cannot be made inside a dispatch mode: make the one it needs first.
    bias = causal_lower_right(max(lengths), P + max(lengths))
    monkeypatch.setattr(dense, "causal_lower_right", lambda *_: bias)
    shapes = []

    class Shapes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            shapes.extend(t.shape for t in (out if isinstance(out, (tuple, list)) else [out])
                          if isinstance(t, torch.Tensor))
            return out

    prompt, responses = _group(6, P, lengths)
    model = _model("qwen2", "sdpa")
    with Shapes():
        logps = dense.packed_logprobs_dense(model, prompt, responses)
        sum(lp.sum() for lp in logps).backward()
    model.zero_grad(set_to_none=True)
    assert len(shapes) > 100  # the counter saw the layers
    assert not [s for s in shapes if tuple(s[-2:]) == (L, L)]


def test_eager_needs_additive_mask():
    """Why _packed_mask branches: eager *adds* the mask, so a bool mask would mask nothing."""
    model = _model("qwen2", "eager")
    prompt, responses = _group(4, 6, [5, 7])
    L = len(prompt) + 12
    ids = torch.tensor([prompt + responses[0] + responses[1]])
    seg = torch.tensor([0] * 6 + [1] * 5 + [2] * 7)
    allowed = torch.ones(L, L, dtype=torch.bool).tril() & ((seg[None] == 0) | (seg[None] == seg[:, None]))
    pos = torch.tensor([list(range(6)) + list(range(6, 11)) + list(range(6, 13))])
    additive = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
    with torch.no_grad():
        as_bool = model(input_ids=ids, attention_mask=allowed[None, None], position_ids=pos).logits
        right = model(input_ids=ids, attention_mask=additive[None, None], position_ids=pos).logits
    assert (as_bool - right).abs().max() > 1e-2


@pytest.mark.parametrize("packed", [packed_logprobs_dense, packed_logprobs], ids=["dense", "gather"])
def test_rejects_empty_inputs(packed):
    model = _model("qwen2", "sdpa")
    with pytest.raises(ValueError, match="non-empty"):
        packed(model, [1, 2], [[3], []])
    with pytest.raises(ValueError, match="non-empty"):
        packed(model, [], [[3]])


def test_mask4d_rejects_unknown_attention():
    model = _model("qwen2", "sdpa")
    model.config._attn_implementation = "flex_attention"
    try:
        with pytest.raises(NotImplementedError, match="packed_logprobs"):
            packed_logprobs_mask4d(model, [1, 2], [[3]])
        # the shared-prompt path does not depend on the attention implementation
        assert packed_logprobs(model, [1, 2], [[3]])[0].shape == (1,)
    finally:
        model.config._attn_implementation = "sdpa"


def test_token_counts_and_speedup():
    assert group_token_counts(10, [3, 5, 4]) == (3 * 15, 22)
    assert group_token_counts(10, [3, 5, 4], padded=False) == (13 + 15 + 14, 22)
    assert theoretical_speedup(512, 128, 8) == pytest.approx(8 * 640 / (512 + 1024))  # 3.33x
    assert theoretical_speedup(7, 9, 1) == 1.0  # one response: nothing to share
    unpacked, packed = group_token_counts(512, [128] * 8)
    assert unpacked / packed == pytest.approx(theoretical_speedup(512, 128, 8))


# ----------------------------------------------------------------- properties


@st.composite
def groups(draw):
    P = draw(st.integers(1, 40))
    lengths = draw(st.lists(st.integers(1, 30), min_size=1, max_size=6))
    tokens = st.integers(0, VOCAB - 1)
    prompt = draw(st.lists(tokens, min_size=P, max_size=P))
    responses = [draw(st.lists(tokens, min_size=r, max_size=r)) for r in lengths]
    temperature = draw(st.floats(0.5, 2.0))
    return prompt, responses, temperature


PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("family,attn", CASES)
@PROPERTY
@given(group=groups())
def test_property_logprobs(family, attn, group):
    prompt, responses, temperature = group
    model = _model(family, attn)
    with torch.no_grad():
        for packed in PACKED.values():
            _assert_logprobs_equal(model, packed, prompt, responses, temperature)


@pytest.mark.parametrize("packed", [packed_logprobs_dense, packed_logprobs], ids=["dense", "gather"])
@pytest.mark.parametrize("family,attn", [("qwen2", "sdpa"), ("llama", "eager")])
@PROPERTY
@given(group=groups(), seed=st.integers(0, 2**16))
def test_property_gradients(family, attn, packed, group, seed):
    prompt, responses, temperature = group
    _assert_grads_equal(_model(family, attn), packed, prompt, responses, temperature, seed)
