"""When shared-prompt packing pays on this device (engine.shared_prompt=auto): one group's log-prob
pass, unpacked and packed, in predicted seconds; pack where the packed pass is predicted at least
MARGIN faster.

Nothing fitted. The model's shape (core/results/utilisation.py `model_shape`), the group (prompt
length P, response lengths R_i, G of them) and the device's measured peak (core/devices/peak.py:
matmul FLOP/s, attention FLOP/s, copy B/s, host seconds per op) give, per layout:

    compute = matmuls + attention FLOPs / attention FLOP/s + (bytes copied + traffic) / copy B/s
    matmuls = max(their FLOPs / matmul FLOP/s, their weights' bytes / copy B/s)   per weight set
    host    = ops dispatched x seconds per op
    pass    = compute + host          where the host runs each op itself (CPU)
              max(compute, host)      where it queues kernels ahead of the device (CUDA, NPU)

FLOPs (utilisation.py's count; a backward is twice its forward): 2 x (layer matmul weights) per
token the decoder layers run (unpacked: G rows of P + R_max; packed: P + G*R_max, `dense` pads its
responses as the rows do) plus lm_head over the predicting positions (the same in both), and
attention 4 H Dh per (query, key) pair a causal kernel visits (unpacked: G (P+R)^2 / 2; packed: P^2
/ 2 for the prompt plus G R (P + R/2) for the responses), at the attention kernel's own measured
FLOP/s (peak.py's attention probe at the model's head width: its softmax runs beside its matmuls, so
it reaches a fraction of the matmul's). A matmul over few tokens waits on its weights instead (read
once forward; in training read again for the input gradient and their gradient written): the same in
both layouts. Bytes copied: the packed layout's (the prompt's K/V into each of the G rows, the two
halves of the output stream). Traffic: what the layers' other operators (norms, rotary, activations,
residual adds, the attention kernel's inputs and outputs, and their backward) read and write, per
token a decoder layer runs (TRAFFIC: a linear count in the hidden, intermediate and K/V widths),
plus the log-softmax over the vocabulary per predicting position in fp32 (LOGITS_TRAFFIC); these
operators are bound by memory, and where the widths are small (a small model's hidden size, on any
device) they cost as much as the matmuls. Ops: what one pass dispatches (OPS below, counted on Qwen2
by tests/unit/core/test_packing_auto.py, which fails when the code's count drifts from them). The
attention share and the weights decide how far the gain falls below the token ratio; the host term
decides where a step made of small kernels gains nothing from fewer tokens (docs/results/gpu.md:
0.5B, P=512 on an H200).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

# pack where the predicted packed pass is >= 10% faster: the model's misses stay on the safe side
MARGIN = 0.10

# Ops one pass dispatches: (fixed, per decoder layer), forward alone and forward + backward. Counted
# with a dispatch counter on Qwen2 (Llama: 9 fewer per layer in training, Qwen3: 41 more, in every
# layout alike); views count as ops: they cost the host a dispatch, not the device a kernel.
OPS = {
    "unpacked": {"forward": (98, 85), "train": (156, 246)},
    "dense": {"forward": (45, 81), "train": (116, 244)},
    "gather": {"forward": (71, 83), "train": (125, 255)},
    "mask4d": {"forward": (98, 85), "train": (156, 246)},  # the HF forward with another mask
    # not countable off CUDA: dense's kernels, one attention
    "flex": {"forward": (45, 81), "train": (116, 244)},
}
# Elements the non-matmul operators of one decoder layer read and write per token it runs: the
# coefficients of (hidden size, intermediate size, K/V width = kv_heads x head_dim, 1), forward
# alone and forward + backward. Counted on Qwen2's unpacked layout with a dispatch counter
# (tests/unit/core/test_packing_auto.py, which fails when the code's count drifts from them); views
# move no data and are not counted. Every layout runs the same layers per token; the packed layouts'
# own copies are the bytes copied above.
TRAFFIC = {"forward": (32.2, 5.0, 12.0, 24.5), "train": (116.4, 14.0, 34.0, 54.9)}
# Elements per vocabulary entry per predicting position: lm_head's logits through the fp32
# log-softmax and the chosen token's pick (engines/trainer/chosen_logprobs.py), and in training
# their backward.
LOGITS_TRAFFIC = {"forward": 7.0, "train": 17.0}
LOGITS_BYTES = 4  # the log-probs are computed in fp32 whatever the model's dtype


@dataclass(frozen=True)
class Device:
    """What the model needs of a device (from peak.py's measured peak)."""

    flops_per_s: float
    copy_bytes_per_s: float
    launch_s: float  # host seconds per dispatched op
    # CPU: the host runs each op (compute + host); accelerators: max(compute, host)
    host_waits: bool
    # the attention kernel's, at the model's head width (None: matmul's)
    attention_flops_per_s: float | None = None

    @classmethod
    def from_peak(cls, peak: dict, host_waits: bool,
                  attention_flops_per_s: float | None = None) -> "Device":
        return cls(peak["matmul_flops_per_s"], peak["copy_bytes_per_s"], peak["launch_s_per_op"],
                   host_waits,
                   attention_flops_per_s)

    @property
    def attention_rate(self) -> float:
        return self.attention_flops_per_s or self.flops_per_s


@dataclass(frozen=True)
class Pass:
    """One layout's predicted pass: seconds of compute and of host dispatch, and their total."""

    compute_s: float
    host_s: float
    seconds: float

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.host_s else "host"


@dataclass(frozen=True)
class Choice:
    """auto's decision for one group (micro-batch): pack or not, and why."""

    packed: bool
    predicted_speedup: float  # unpacked seconds / packed seconds, predicted
    token_ratio: float  # decoder tokens unpacked / packed
    attention_share: float  # attention's share of the unpacked pass's compute seconds
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def widths(shape: dict) -> tuple[float, float, float]:
    """(hidden, intermediate, vocabulary) of a model shape (model_shape's); shapes recorded before
    these were kept are derived from the weights: a layer's matmuls are hidden x (q + k + v + o) + 3
    x hidden x intermediate (Qwen2, Llama), lm_head is vocabulary x hidden."""
    q, kv = shape["heads"] * shape["head_dim"], shape["kv_heads"] * shape["head_dim"]
    hidden = shape.get("hidden") or q
    per_layer = (shape["matmul_params"] - shape["lm_head_params"]) / max(1, shape["layers"])
    inter = shape.get("intermediate") or max(0.0,
                                             (per_layer - hidden * (2 * q + 2 * kv)) / (3 * hidden))
    vocab = shape.get("vocab") or shape["lm_head_params"] / hidden
    return hidden, inter, vocab


def traffic_bytes(shape: dict, train: bool, tokens: float, head_tokens: float) -> float:
    """Bytes the non-matmul operators move: the decoder layers' over `tokens`, the log-softmax's
    over the `head_tokens` predicting positions (TRAFFIC, LOGITS_TRAFFIC)."""
    kind = "train" if train else "forward"
    hidden, inter, vocab = widths(shape)
    a, b, c, d = TRAFFIC[kind]
    per_token = a * hidden + b * inter + c * shape["kv_heads"] * shape["head_dim"] + d
    return (tokens * shape["layers"] * per_token * shape["param_bytes"]
            + head_tokens * vocab * LOGITS_TRAFFIC[kind] * LOGITS_BYTES)


def _pass(shape: dict, dev: Device, kind: str, train: bool, tokens: int, head_tokens: int,
          pairs: float, copied: float) -> tuple[Pass, float]:
    """-> (the pass, its attention FLOPs). tokens: decoder-layer tokens; pairs: attention (query,
    key) pairs per layer; copied: elements copied per layer (forward)."""
    layer_params = shape["matmul_params"] - shape["lm_head_params"]
    mult = 3 if train else 1

    def matmuls(params: float, n: int) -> float:
        """Seconds of the matmuls of `params` weights over n tokens: their FLOPs, or reading the
        weights (forward; training also reads them for the input gradient and writes their
        gradient), the slower: with few tokens a matmul waits on its weights, whatever the
        layout."""
        return max(2.0 * params * n * mult / dev.flops_per_s,
                   params * shape["param_bytes"] * mult / dev.copy_bytes_per_s)

    attention = 4.0 * shape["heads"] * shape["head_dim"] * pairs * shape["layers"] * mult
    # read + write
    copy_bytes = 2.0 * copied * shape["layers"] * shape["param_bytes"] * (2 if train else 1)
    moved = copy_bytes + traffic_bytes(shape, train, tokens, head_tokens)
    compute = matmuls(layer_params, tokens) + matmuls(shape["lm_head_params"], head_tokens) + \
        (attention / dev.attention_rate) + moved / dev.copy_bytes_per_s
    fixed, per_layer = OPS[kind]["train" if train else "forward"]
    host = (fixed + per_layer * shape["layers"]) * dev.launch_s
    return Pass(compute, host, compute + host if dev.host_waits else max(compute, host)), attention


def predict(shape: dict, dev: Device, impl: str, P: int, lengths: list[int],
            train: bool) -> tuple[Pass, Pass, float]:
    """-> (unpacked pass, packed pass, attention's share of the unpacked compute) for one group."""
    G, R, N = len(lengths), max(lengths), sum(lengths)
    kv = shape["kv_heads"] * shape["head_dim"]
    unpacked, attn = _pass(shape, dev, "unpacked", train, G * (P + R), G * R, G * (P + R) ** 2 / 2,
                           0.0)
    if impl == "mask4d":  # one sequence of L tokens under an [L, L] mask: every pair computed
        L = P + N
        packed, _ = _pass(shape, dev, impl, train, L, N, L * L, 0.0)
    else:
        tokens = P + (N if impl == "gather" else G * R)
        pairs = P * P / 2 + G * R * (P + R / 2)
        # K/V rows, output stream
        copied = 2 * G * (P + R) * kv + tokens * shape["heads"] * shape["head_dim"]
        packed, _ = _pass(shape, dev, impl, train, tokens, N if impl == "gather" else G * R, pairs,
                          copied)
    return unpacked, packed, min(1.0, attn / dev.attention_rate / (unpacked.compute_s or 1.0))


def choose(shape: dict, dev: Device, impl: str, P: int, lengths: list[int],
           train: bool = True) -> Choice:
    """Pack this group where the packed pass is predicted at least MARGIN faster than the unpacked
    one."""
    G, R = len(lengths), max(lengths)
    ratio = G * (P + R) / (P + G * R)
    if G < 2:
        return Choice(False, 1.0, ratio, 0.0, "one response: nothing to share")
    unpacked, packed, share = predict(shape, dev, impl, P, lengths, train)
    speedup = unpacked.seconds / packed.seconds
    ms = lambda p: f"{p.compute_s * 1e3:.3g} ms compute, {p.host_s * 1e3:.3g} ms host"  # noqa: E731
    why = (f"predicted {speedup:.2f}x (token ratio {ratio:.2f}x, attention {share:.0%} of the "
           f"compute; unpacked {unpacked.bound}-bound: {ms(unpacked)}; packed "
           f"{packed.bound}-bound: {ms(packed)})")
    packed_faster = speedup >= 1 + MARGIN
    return Choice(packed_faster, speedup, ratio, share,
                  why if packed_faster else f"{why} < {1 + MARGIN:.2f}x: unpacked")
