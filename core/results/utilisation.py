"""How close each stage runs to the hardware: model FLOP utilisation (MFU) and memory-bandwidth
utilisation.

Per iteration, the work each stage must do is counted from the model's shape and the iteration's
samples (`stage_work`); the aggregate divides it by the stage's measured seconds (summed over the
workers that ran it, so the rate is per device) and by one device's measured peak
(core/devices/peak.py, `rlbench env`):

    MFU      = stage FLOPs / stage seconds / peak matmul FLOP/s
    BW util  = stage bytes / stage seconds / peak copy B/s

FLOPs follow VERL's flops counter: a forward pass costs 2 N per token (N: the weights of every
matmul, lm_head included) plus 4 L H Dh S^2 per sequence of length S for attention; backward twice
the forward. Stages: old_logprob and ref_logprob one forward each; update forward + backward (plus
the reference forward, with tri-model, which computes it in the same pass); rollout the prefill of
each prompt once (prefix sharing) and one forward per generated token over its context. With
shared-prompt packing a group's prompt is processed once (its tokens and attention counted once).
Bytes are counted for the rollout only, where decoding is memory-bound: every decode step reads the
weights, every generated token reads its context's K/V. A new per-stage quantity is one more entry
in `stage_work` and `utilisation`.
"""
from __future__ import annotations

from collections import defaultdict

from rlbench.core.record.stages import Stage


def model_shape(model) -> dict:
    """The numbers the counts need, from an HF causal LM (run once per cell)."""
    import torch  # inside: instant path: `rlbench report` imports this module

    cfg = model.config
    matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    head = getattr(model, "lm_head", None)
    return {"matmul_params": int(matmul),
            "lm_head_params": int(head.weight.numel()) if head is not None else 0,
            "layers": cfg.num_hidden_layers, "heads": heads,
            "kv_heads": getattr(cfg, "num_key_value_heads", None) or heads, "head_dim": head_dim,
            "hidden": cfg.hidden_size, "intermediate": getattr(cfg, "intermediate_size", None),
            "vocab": cfg.vocab_size, "param_bytes": next(model.parameters()).element_size()}


def _forward_flops(shape: dict, tokens: int, seq_sq: int) -> float:
    return (2.0 * shape["matmul_params"] * tokens + 4.0 * shape["layers"] * shape["heads"]
            * shape["head_dim"] * seq_sq)


def _groups(samples: list[dict]) -> dict[int, tuple[int, list[int]]]:
    """prompt index -> (prompt length, response lengths) of one iteration's samples."""
    out: dict[int, tuple[int, list[int]]] = {}
    for s in samples:
        out.setdefault(s["prompt"], (s["prompt_len"], []))[1].append(s["response_len"])
    return out


def stage_work(shape: dict, samples: list[dict], rollout_stats: list[dict], *,
               shared_prompt: bool | set[int],
               tri_model: bool, kl: bool) -> dict[str, dict[str, float]]:
    """stage -> {"flops", "bytes"} of one iteration (bytes only where counted). shared_prompt:
    whether every group was packed, or the prompt indices of the groups that were
    (engine.shared_prompt=auto)."""
    groups = _groups(samples)
    packed = {i for i in groups if shared_prompt is True or (isinstance(shared_prompt, set) and i
                                                             in shared_prompt)}
    # A packed group is one sequence: the prompt once, each response attending it; the others G
    # rows.
    tokens = sum(p + sum(rs) if i in packed else sum(p + r for r in rs)
                 for i, (p, rs) in groups.items())
    seq_sq = sum(p * p + sum(2 * p * r + r * r for r in rs) if i in packed
                 else sum((p + r) ** 2 for r in rs)
                 for i, (p, rs) in groups.items())
    fwd = _forward_flops(shape, tokens, seq_sq)
    work = {Stage.OLD_LOGPROB.value: {"flops": fwd}, Stage.REF_LOGPROB.value: {"flops": fwd},
            Stage.UPDATE.value: {"flops": 3 * fwd + (fwd if tri_model and kl else 0.0)}}
    # Rollout: prefill once per prompt, then one token at a time over a growing context.
    prefill = _forward_flops(shape, sum(p for p, _ in groups.values()),
                             sum(p * p for p, _ in groups.values()))
    # keys read while decoding
    context = sum(r * p + r * (r - 1) // 2 for p, rs in groups.values() for r in rs)
    decode_tokens = sum(r for _, rs in groups.values() for r in rs)
    # a token attends its context
    rollout = {"flops": prefill + _forward_flops(shape, decode_tokens, context)}
    steps = sum(s.get("decode_steps") or 0 for s in rollout_stats if s)
    if steps:
        kv_bytes = (2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"]
                    * shape["param_bytes"])
        rollout["bytes"] = float(steps * shape["matmul_params"] * shape["param_bytes"] + context
                                 * kv_bytes)
    work[Stage.ROLLOUT.value] = rollout
    return work


def utilisation(iterations: list[dict], peak: dict | None) -> dict:
    """stage -> {flops_per_s, mfu, bytes_per_s, bw_util} over the given iterations (rates per
    device: work over the stage's seconds summed across its workers); {} without work records or a
    peak."""
    if not peak:
        return {}
    work: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    seconds: dict[str, float] = defaultdict(float)
    for it in iterations:
        for stage, w in (it.get("work") or {}).items():
            s = (it.get("stage_s") or {}).get(stage, 0.0)
            if s <= 0:
                continue  # a stage that did not run (tri-model has no ref pass of its own)
            seconds[stage] += s
            for k, v in w.items():
                work[stage][k] += v
    out = {}
    for stage, w in work.items():
        rate = w["flops"] / seconds[stage]
        row = {"flops_per_s": rate, "mfu": rate / peak["matmul_flops_per_s"]}
        if "bytes" in w:
            row["bytes_per_s"] = w["bytes"] / seconds[stage]
            row["bw_util"] = row["bytes_per_s"] / peak["copy_bytes_per_s"]
        out[stage] = row
    return out
