"""Limits checked before any work starts (docs/architecture/runs-that-end-badly.md): a config that
cannot fit fails in a second with exit 2 naming the keys and the limit, not minutes later inside a
worker, or, worse, silently.

- **Positions.** The longest prompt of the data (train and eval splits, tokenized as the run will)
  plus rollout.max_new_tokens must fit the model's positions (max_position_embeddings) and, with the
  vLLM backend, rollout.max_model_len. Drawn response lengths (rollout.response_length fixed /
  lognormal) are clipped to max_new_tokens, and evaluation generates up to max_new_tokens, so
  max_new_tokens is the cap in every mode. Past the positions a model has no trained embedding (RoPE
  extrapolates into nonsense, the built-in sampler's cache ends) and vLLM refuses the request
  mid-run. The same sum is the least train.micro_batch_tokens may be (a sequence is never split over
  micro-batches).
- **Memory**, where the device's memory can be found (CPU: available RAM; CUDA: the GPU's memory):
  an estimate of what the run holds at once, from the model's shape and the batch keys. It counts
  only what surely is there (weights, gradients, AdamW state, reference model, KV cache of the
  sequences in flight, the logits of a micro-batch or of one slice of its log-prob pass, whichever
  is smaller), so it errs low: a refusal means the run cannot fit.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlbench.core import schedules
from rlbench.core.components import BACKENDS
from rlbench.core.errors import UserError

GIB = 1 << 30
# Python + torch per process (CPU runs), a floor: RSS measured 450 MB per process of a tiny-model
# run, part of it shared libraries.
PROCESS_OVERHEAD = 200 << 20
# fp32 logits per slice of the trainer's log-prob pass: engines/trainer/chosen_logprobs.py's
# LOGITS_BUDGET_BYTES (the core does not import the engines; tests/unit/core/test_limits.py holds
# them equal)
LOGITS_SLICE_BYTES = 256 << 20


@dataclass
class ModelFacts:
    """What the checks need to know about the policy model (engines/model/loader.py model_facts)."""

    positions: int  # max_position_embeddings
    params: int
    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int


def check(cfg, facts: ModelFacts, prompt_max: int, kind: str, capacity: int | None) -> None:
    """UserError (exit 2) when the run cannot fit. kind: the device kind (cpu, cuda, npu); capacity:
    bytes per device (core/devices/device.py memory_capacity), None = not known, memory not
    checked."""
    check_positions(cfg, facts, prompt_max)
    if capacity is not None:
        check_memory(cfg, facts, prompt_max, kind, capacity)


def check_positions(cfg, facts: ModelFacts, prompt_max: int) -> None:
    r = cfg.rollout
    need = prompt_max + r.max_new_tokens
    drawn = f" (response_length={r.response_length}: drawn lengths are clipped to it)" \
        if r.response_length != "eos" else ""
    what = (f"the longest prompt ({prompt_max} tokens, data.*) + "
            f"rollout.max_new_tokens={r.max_new_tokens}{drawn} = {need} tokens")
    if getattr(r, "max_model_len",
               None) is not None and "max_model_len" in BACKENDS[r.backend].options.model_fields:
        if r.max_model_len > facts.positions:
            raise UserError(f"rollout.max_model_len={r.max_model_len} exceeds the model's "
                            f"{facts.positions} "
                            "positions (max_position_embeddings); allowed: at most that")
        if need > r.max_model_len:
            raise UserError(f"{what} exceed rollout.max_model_len={r.max_model_len}: raise it (up "
                            f"to the model's {facts.positions} positions) or lower "
                            f"rollout.max_new_tokens to at most {r.max_model_len - prompt_max}")
    budget = cfg.train.micro_batch_tokens
    if budget is not None and budget < need:
        raise UserError(f"train.micro_batch_tokens={budget} is smaller than the longest sequence: "
                        f"{what}; allowed: at least {need} (a sequence is never split over "
                        f"micro-batches)")
    if need > facts.positions:
        raise UserError(f"{what} exceed the model's {facts.positions} positions "
                        f"(max_position_embeddings): lower rollout.max_new_tokens to at most "
                        f"{facts.positions - prompt_max} (or data.few_shot, "
                        "for shorter prompts)")


def check_memory(cfg, facts: ModelFacts, prompt_max: int, kind: str, capacity: int) -> None:
    """Summed over the run's processes on CPU (they share the RAM); the busiest device otherwise."""
    e = cfg.engine
    train, rollout = replica_bytes(cfg, facts, prompt_max)
    sync = schedules.SCHEDULES[e.schedule].colocated  # one replica of each kind per device
    if kind == "cpu":
        n_train, n_rollout = (e.num_devices, e.num_devices) if sync else (e.train_devices,
                                                                          e.rollout_devices)
        procs = (e.num_devices if sync else e.train_devices + e.rollout_devices) + 1  # + the driver
        # The driver evaluates with its own sampler and keeps a copy of the policy.
        driver = rollout + facts.params * facts.dtype_bytes
        need = n_train * train + n_rollout * rollout + driver + procs * PROCESS_OVERHEAD
        where = "available memory"
        note = (f"{procs} processes of at least {PROCESS_OVERHEAD / GIB:.2f} GiB (Python, torch) "
                f"each, ")
    else:
        # vLLM takes its share of the GPU, whatever it needs
        if BACKENDS[cfg.rollout.backend].gpu_share:
            rollout = cfg.rollout.gpu_memory_utilization * capacity
        need = train + rollout if sync or e.share_devices else max(train, rollout)
        where, note = f"memory of one {kind} device", ""
    if need > capacity:
        batch = (f"train.micro_batch_size={cfg.train.micro_batch_size}"
                 if cfg.train.micro_batch_tokens is None
                 else f"train.micro_batch_tokens={cfg.train.micro_batch_tokens}")
        raise UserError(
            f"the run needs at least {need / GIB:.1f} GiB but the {where} is {capacity / GIB:.1f} "
            f"GiB ({note}a training replica {train / GIB:.2f} GiB, a rollout replica "
            f"{rollout / GIB:.2f} GiB; model {facts.params:,} parameters of {facts.dtype_bytes} "
            f"bytes, sequences up to {prompt_max + cfg.rollout.max_new_tokens} tokens): lower "
            f"{batch}, rollout.max_num_seqs={cfg.rollout.max_num_seqs} or "
            f"rollout.max_new_tokens={cfg.rollout.max_new_tokens}, or use a smaller model")


def logits_bytes(cfg, facts: ModelFacts, prompt_max: int) -> float:
    """The trainer's logits at once: they cover a micro-batch's response positions
    (train.micro_batch_size responses of up to max_new_tokens, or a token budget's positions less a
    prompt), in the model's dtype and their fp32 log-softmax, but the log-probs go through in slices
    of at most LOGITS_SLICE_BYTES of fp32 logits (engines/trainer/chosen_logprobs.py), so one
    slice's positions where a micro-batch has more."""
    r, t = cfg.rollout, cfg.train
    positions = t.micro_batch_size * r.max_new_tokens if t.micro_batch_tokens is None \
        else max(r.max_new_tokens, t.micro_batch_tokens - prompt_max)
    positions = min(positions, max(1, LOGITS_SLICE_BYTES // (4 * facts.vocab)))
    return positions * facts.vocab * (facts.dtype_bytes + 4)


def replica_bytes(cfg, facts: ModelFacts, prompt_max: int) -> tuple[float, float]:
    """(bytes of a training replica, bytes of a rollout replica), counting only what surely is
    there."""
    r, t = cfg.rollout, cfg.train
    seq = prompt_max + r.max_new_tokens
    weights = facts.params * facts.dtype_bytes
    kv = (r.max_num_seqs * seq * 2 * facts.layers * facts.kv_heads * facts.head_dim
          * facts.dtype_bytes)
    # policy, reference, gradients, AdamW's moments
    train = 5 * weights + logits_bytes(cfg, facts, prompt_max)
    rollout = weights + kv + r.max_num_seqs * facts.vocab * 4  # + the last step's logits
    return train, rollout
