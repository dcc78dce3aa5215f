"""The built-in rollout backend: a batched sampler with a slot-based KV cache, in plain PyTorch.

It reuses the submodules of a Hugging Face `Qwen2ForCausalLM` / `LlamaForCausalLM` (embeddings,
norms, q/k/v/o projections, MLPs, rotary embedding, lm_head) but runs its own decode loop:

- KV cache: per layer one K and one V tensor [S, Hkv, Lc, D] (S = max_num_seqs slots, Lc = cache
  length, fixed while it suffices). Every slot has its own length; an additive mask over the cache
  positions hides the rest, so a decode step's shapes never change with the lengths.
- The decode step (decode_step.py) is one static-shape function over preallocated tensors (tokens,
  positions, lengths, pre-drawn uniforms, outputs), run at fixed batch sizes (buckets); on CUDA each
  bucket's step is captured once as a CUDA graph and replayed (rollout.cuda_graphs). The host reads
  one thing per step: whether any sequence finished.
- Continuous batching: live sequences always occupy slots 0..B-1, so a step runs over the slot range
  [0, bucket) (a view) instead of gathering rows. A finished slot is refilled from pending work;
  when none is left, the highest live slot moves into the hole (a copy on that event only).
- Prefix sharing: a prompt is prefilled once; its K/V are copied into the slots of its G samples.
- Seeding: sample j of request i draws its uniforms from its own generator, seeded by a stable hash
  of (seed, iteration, i, j), and picks tokens by inverse CDF in float64, so the tokens do not
  depend on which batch, slot or worker generated them.
- Behaviour log-probs: log_softmax(logits / temperature)[token], taken *before* top-p filtering (the
  distribution the trainer recomputes; top-p only truncates where samples can land). Greedy: T = 1.
- Stops: EOS (kept in the response, with its log-prob), max_new_tokens, or prompt + response =
  max_len.
- Partial rollout (`generate(..., poll=...)`): at every token boundary the caller may hand over new
  weights; the sampler loads them and continues the sequences in flight. resume_kv="recompute" (what
  AReaL and verl's fully-async mode do: the interrupted requests are resubmitted with their partial
  output, so the prefix is prefilled again under the new weights) rebuilds every live slot's K/V
  with one prefill of prompt + tokens so far; "keep" (vLLM's pause_generation(mode="keep",
  clear_cache=False)) continues on the stale cache. Every token records the version that sampled it.
- Response lengths from a distribution (`LengthSampling`, rollout.response_length fixed |
  lognormal):
  each sample's length is drawn from its own seed and EOS does not stop it, so a randomly
  initialised model (which almost never samples EOS) still produces a realistic long tail of
  lengths.

The forward passes over the cache (prefill, a decode step's) are in slot_forward.py; the step and
its buckets in decode_step.py; how a token is drawn (seeds, inverse CDF, top-p) in sampling.py.
"""
from __future__ import annotations

import time

from collections import deque
from dataclasses import dataclass
from typing import Callable

import torch

from rlbench.core.devices import device as dev
from rlbench.core.record import lifecycle
from rlbench.core.record.lifecycle import Phase
from rlbench.engines.model import layers
from rlbench.engines.model.compiled import CompileLog, compile_model
from rlbench.engines.rollout.base import Group, PendingGroup, PromptRequest, SamplingParams
from rlbench.engines.rollout.decode_step import (MAX_BUCKET, WINDOW_ROUND, DecodeStep, StepRunner,
                                                 batch_buckets)
from rlbench.engines.rollout.sampling import (RESPONSE_LENGTHS, RESUME_KV, StepMode, draw,
                                              sample_seed,
                                              target_length)
from rlbench.engines.rollout.slot_forward import SlotForward
from rlbench.engines.rollout.step_costs import StepCosts
from rlbench.core import hooks
from rlbench.core.record import progress


@dataclass
class _Request(PendingGroup):
    """A PendingGroup plus the built-in sampler's admission state."""

    # (K/V per layer [Hkv, P, D], last logits [V]) until all G are admitted
    prefill: tuple | None = None
    admitted: int = 0  # samples given a slot so far


CACHE_ROUND = 64  # the cache length is a multiple of this (fewer reallocations, aligned mask rows)


class BuiltinSampler(SlotForward, DecodeStep):
    """`RolloutBackend` over an HF causal LM the sampler owns (the caller passes its own copy)."""

    def __init__(self, model, eos_token_id: int, max_num_seqs: int, device=None,
                 max_len: int | None = None,
                 resume_kv: str = "recompute", cuda_graphs: bool | None = None,
                 max_bucket: int = MAX_BUCKET):
        """cuda_graphs: rollout.cuda_graphs (None: on where the device is CUDA); max_bucket: the
        largest batch one step runs (decode_step.py), more sequences are split over several
        steps."""
        cfg = model.config
        layers.check_supported(model)
        self.device = (torch.device(device) if device is not None
                       else next(model.parameters()).device)
        self.model = model.to(self.device).eval()
        self.eos_token_id = int(eos_token_id)
        self.max_num_seqs = int(max_num_seqs)
        self.max_len = int(max_len or cfg.max_position_embeddings)
        if resume_kv not in RESUME_KV:
            raise ValueError(f"resume_kv must be one of {RESUME_KV}, got {resume_kv!r}")
        # partial rollout: rebuild the live slots' K/V after new weights, or keep it
        self.resume_kv = resume_kv
        # True inside a generate() with poll: per-token versions are reported
        self._versions = False
        self.last_stats: dict = {}
        m = self.model.model
        self.embed, self.layers, self.norm, self.lm_head = (m.embed_tokens, list(m.layers), m.norm,
                                                            self.model.lm_head)
        attn = self.layers[0].self_attn
        self.n_heads, self.head_dim, self.scale = (cfg.num_attention_heads, attn.head_dim,
                                                   attn.scaling)
        self.n_kv = cfg.num_key_value_heads
        self.dtype = next(self.model.parameters()).dtype
        # allocated cache length and output columns; grow on demand
        self._cache_len = self._max_new = 0
        self._eos_stops = True  # False while lengths come from a distribution (LengthSampling)
        self._compiled = False  # engine.compile decode (compile())
        self._alloc_slots()
        self.version = 0
        self._runner = StepRunner(self._step, self.device, dev.use_graphs(cuda_graphs, self.device),
                                  batch_buckets(self.max_num_seqs, max_bucket), self.max_num_seqs)

    def compile(self) -> None:
        """engine.compile decode: the model compiled (engines/model/compiled.py: the prefill and the
        decode step run the compiled functions around each layer's attention) and compiled at once,
        through a prefill and decode steps (`_warm`), timed as the start-up phase `compile`; the
        CUDA graphs then capture the compiled kernels. Its counts join every generate()'s stats."""
        compile_model(self.model)
        with lifecycle.phase(Phase.COMPILE):
            self._warm()
        self._compiled = True

    @property
    def version(self) -> int:
        """The weight version that samples the next token (mirrored on the device for the step)."""
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = int(value)
        self._version_t.fill_(self._version)

    # ---------------------------------------------------------------- weights

    def load_weights(self, state: dict, version: int) -> None:
        """Copy every parameter from `state` (names of named_parameters() or state_dict()); set
        `version`."""
        params = dict(self.model.named_parameters())
        missing = [n for n in params if n not in state]
        if missing:
            raise KeyError(f"load_weights: state lacks {len(missing)} parameters, e.g. "
                           f"{missing[:3]}")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(state[name])
        self.version = version

    # ---------------------------------------------------------------- slots and sampling

    def _alloc_slots(self) -> None:
        """The per-slot state the decode step reads and writes, [S] each, allocated once."""
        S, long = self.max_num_seqs, dict(dtype=torch.long, device=self.device)
        # next token to feed, its position
        self._tok, self._pos = torch.zeros(S, **long), torch.zeros(S, **long)
        # tokens generated, allowed
        self._ngen, self._limit = torch.zeros(S, **long), torch.ones(S, **long)
        self._live, self._done, self._redraw = (torch.zeros(S, dtype=torch.bool, device=self.device)
                                                for _ in range(3))
        self._version_t = torch.zeros(1, **long)
        self._rows = torch.arange(S, device=self.device)
        self._step_logits_buf = None  # [S, V] fp32, for top-p redraws (allocated when first needed)
        self._views: dict = {}  # (a, b) -> the step's views of slots [a, b) (decode_step.py)

    def _ensure_cache(self, length: int, max_new: int, top_p: float = 1.0) -> None:
        """Make the KV cache [S, Hkv, Lc, D] per layer hold `length` positions and the output rows
        [S, M] `max_new` tokens, and reset every slot to free. A buffer that grows is reallocated
        (then the captured steps are dropped: they read the old one); otherwise everything is
        reused.

        Zero-filled, not empty(): a masked position still meets V in SDPA's matmul (0 * NaN = NaN).
        """
        S, dev_ = self.max_num_seqs, self.device
        if length > self._cache_len:
            Lc = min(self.max_len, -(-length // CACHE_ROUND) * CACHE_ROUND)
            shape = (S, self.n_kv, Lc, self.head_dim)
            self.k_cache = [torch.zeros(shape, dtype=self.dtype, device=dev_) for _ in self.layers]
            self.v_cache = [torch.zeros(shape, dtype=self.dtype, device=dev_) for _ in self.layers]
            self._make_rope(Lc)
            self._cache_len = Lc
            self._runner.clear()
            self._views.clear()
        if max_new > self._max_new:
            # pre-drawn uniforms
            self._unif = torch.zeros(S, max_new, dtype=torch.float64, device=dev_)
            self._out_tok = torch.zeros(S, max_new, dtype=torch.long, device=dev_)
            self._out_lp = torch.zeros(S, max_new, dtype=torch.float64, device=dev_)
            # version that sampled each
            self._out_ver = torch.zeros(S, max_new, dtype=torch.long, device=dev_)
            self._max_new = max_new
            self._runner.clear()
            self._views.clear()
        if top_p < 1.0 and self._step_logits_buf is None:
            self._step_logits_buf = torch.zeros(S, self.lm_head.out_features, device=dev_)
            self._views.clear()
        # slot -> (request, sample index)
        self._meta: list[tuple[_Request, int] | None] = [None] * S

    def _free(self, rows) -> None:
        """Mark slots free: the step leaves them where they are (position 0, no tokens) and never
        finishes them."""
        for t in (self._live, self._done, self._redraw, self._pos, self._ngen):
            t[rows] = 0

    def _record(self, rows, logits, sp: SamplingParams):
        """Sample the next token of the slots `rows` [k] from logits [k, V]; store it; -> done mask
        [k]."""
        n = self._ngen[rows]
        tok, lp = draw(logits, self._unif[rows, n], sp)
        self._out_tok[rows, n] = tok
        self._out_lp[rows, n] = lp
        self._out_ver[rows, n] = self.version
        self._ngen[rows] = n + 1
        self._tok[rows] = tok
        done = n + 1 >= self._limit[rows]
        return done | (tok == self.eos_token_id) if self._eos_stops else done

    # ---------------------------------------------------------------- slots

    def _install(self, slot: int, kv, P: int) -> None:
        """Copy a prompt's K/V (per layer [Hkv, P, D]) into `slot`; its first token goes at position
        P."""
        for (k, v), kc, vc in zip(kv, self.k_cache, self.v_cache):
            kc[slot, :, :P] = k
            vc[slot, :, :P] = v
        self._pos[slot], self._ngen[slot], self._live[slot] = P, 0, True

    def _admit(self, slots: list[int], pending: deque, sp: SamplingParams):
        """Start pending samples in the free `slots`; -> (rows [k], first-token logits [k, V])."""
        logits = []
        for slot in slots:
            r, j = pending.popleft()
            if r.prefill is None:  # prefix sharing: one prefill per prompt, copied into its G slots
                r.prefill = self._prefill(r.req.prompt_ids)
            kv, last = r.prefill
            P = len(r.req.prompt_ids)
            self._install(slot, kv, P)
            length = target_length(sp, r.req.index, j) or sp.max_new_tokens
            self._limit[slot] = min(length, self.max_len - P)  # prompt + response <= max_len
            if not sp.greedy:
                g = torch.Generator().manual_seed(sample_seed(sp.seed, sp.iteration, r.req.index,
                                                              j))
                self._unif[slot, :sp.max_new_tokens] = torch.rand(sp.max_new_tokens, generator=g,
                                                                  dtype=torch.float64)
            self._meta[slot] = (r, j)
            r.admitted += 1
            if r.admitted == r.g:
                r.prefill = None  # every sample has its copy; free the prompt's K/V
            logits.append(last)
        return torch.tensor(slots, device=self.device), torch.stack(logits)

    def _retire(self, slots: list[int], out: list[Group], on_group) -> int:
        """Collect finished slots' responses; emit each group whose G samples are done. -> tokens
        collected."""
        tokens = 0
        for slot in slots:
            r, j = self._meta[slot]
            self._meta[slot] = None
            n = int(self._ngen[slot])
            toks = self._out_tok[slot, :n].tolist()
            eos = self._eos_stops and toks[-1] == self.eos_token_id
            versions = self._out_ver[slot, :n].tolist() if self._versions else None
            r.finish(j, toks, self._out_lp[slot, :n].tolist(), eos, self.version, out, on_group,
                     versions)
            tokens += n
        if slots:
            self._free(torch.tensor(slots, device=self.device))
        return tokens

    def _fill(self, pending: deque, sp: SamplingParams, out: list[Group], on_group) -> int:
        """Refill free slots from pending work. A sample can finish on its first token (EOS or a
        limit of 1), which frees its slot again, hence the loop. -> tokens of samples retired
        here."""
        tokens = 0
        while pending:
            free = [i for i, m in enumerate(self._meta) if m is None][:len(pending)]
            if not free:
                break
            rows, logits = self._admit(free, pending, sp)
            done = self._record(rows, logits, sp)
            tokens += self._retire(rows[done].tolist(), out, on_group)
        return tokens

    def _compact(self) -> int:
        """Move the highest live slots into holes so that live slots are 0..B-1; -> B.

        A step then runs over a slot range (a view) instead of gathering rows every step; this copy
        happens only when a sequence ends with no pending work left to refill its slot.
        """
        live = [i for i, m in enumerate(self._meta) if m is not None]
        B = len(live)
        holes = [i for i in range(B) if self._meta[i] is None]
        movers = [i for i in live if i >= B]
        if holes:
            L = int(self._pos.max()) + 1
            src, dst = torch.tensor(movers, device=self.device), torch.tensor(holes,
                                                                              device=self.device)
            for c in self.k_cache + self.v_cache:
                c[dst, :, :L] = c[src, :, :L]
            for t in (self._tok, self._pos, self._ngen, self._limit, self._live, self._unif,
                      self._out_tok,
                      self._out_lp, self._out_ver):
                t[dst] = t[src]
            self._free(src)
            for s, d in zip(movers, holes):
                self._meta[d], self._meta[s] = self._meta[s], None
        return B

    # ---------------------------------------------------------------- partial rollout

    def _reload(self, B: int, pending: deque, state: dict, version: int) -> int:
        """New weights at a token boundary: load them; with resume_kv="recompute" rebuild the K/V of
        every live slot (0..B-1) by one prefill of its prompt and the tokens it has fed so far.
        Prompts prefilled for samples not yet admitted are prefilled again when admitted. -> tokens
        recomputed."""
        if state is not None:  # None: the caller has loaded them already
            self.load_weights(state, version)
        self.version = version
        for r, _ in pending:
            r.prefill = None
        if self.resume_kv == "keep":
            return 0
        recomputed = 0
        for slot in range(B):
            r, _ = self._meta[slot]
            n = int(self._ngen[slot])  # tokens sampled; the last one is fed by the next decode step
            ids = list(r.req.prompt_ids) + self._out_tok[slot, :n - 1].tolist()
            kv, _ = self._prefill(ids)  # K/V of positions [0, len(ids)) = [0, pos)
            for (k, v), kc, vc in zip(kv, self.k_cache, self.v_cache):
                kc[slot, :, :len(ids)] = k
                vc[slot, :, :len(ids)] = v
            recomputed += len(ids)
        return recomputed

    # ---------------------------------------------------------------- the loop

    def _check(self, requests: list[PromptRequest], sp: SamplingParams) -> None:
        if sp.n < 1 or sp.max_new_tokens < 1:
            raise ValueError(f"need n >= 1 and max_new_tokens >= 1, got n={sp.n}, "
                             f"max_new_tokens={sp.max_new_tokens}")
        if not sp.greedy and sp.temperature <= 0:
            raise ValueError(f"temperature must be > 0 when sampling (got {sp.temperature}); use "
                             f"greedy=True")
        if getattr(sp, "response_length", "eos") not in RESPONSE_LENGTHS:
            raise ValueError(f"response_length must be one of {RESPONSE_LENGTHS}, got "
                             f"{sp.response_length!r}")
        for r in requests:
            if not 0 < len(r.prompt_ids) < self.max_len:
                raise ValueError(f"prompt {r.index} has {len(r.prompt_ids)} tokens; need 1 to "
                                 f"{self.max_len - 1} so that a response fits in "
                                 f"max_len={self.max_len}")

    def _prepare(self, requests: list[PromptRequest], sp: SamplingParams, mode: StepMode) -> None:
        """Buffers for this call (engines/rollout/decode_step.py); on CUDA the steps of a new
        sampling mode are captured now, before any slot is in use (capturing runs them), and every
        slot starts free."""
        longest = max((len(r.prompt_ids) for r in requests), default=1)
        self._ensure_cache(min(self.max_len, longest + sp.max_new_tokens), sp.max_new_tokens,
                           mode.top_p)
        self._free(self._rows)  # a capture's steps then keep every index inside the buffers
        if self._runner.prepare(mode):
            self._free(self._rows)
        self._limit.fill_(1)

    def generate(self, requests: list[PromptRequest], sampling: SamplingParams,
                 on_group: Callable[[Group], None] | None = None,
                 poll: Callable[[], tuple[dict, int] | None] | None = None,
                 hold: Callable[[], bool] | None = None) -> list[Group]:
        """G samples per request with up to max_num_seqs in flight; on_group(group) the moment a
        group is done. -> groups in completion order. Sets `last_stats` (decode steps, batch
        occupancy).

        poll (partial rollout): called at every token boundary; (state, version) -> load those
        weights now (state None: the caller has loaded them) and continue the sequences in flight
        (see _reload); None -> go on. With poll, every group
        carries its tokens' versions (Group.token_versions) when they differ.

        hold (a schedule that runs ahead, engines/rollout/gate.py): called at every token boundary;
        it waits while the schedule holds its rollout workers and says whether it did (that time is
        no decode step's cost)."""
        sp = sampling
        self._check(requests, sp)
        self._eos_stops = getattr(sp, "response_length", "eos") == "eos"
        self._versions = poll is not None
        mode = StepMode.of(sp)
        out: list[Group] = []
        steps = active_sum = 0
        cost = StepCosts(self._runner.buckets, 0 if self._runner.graphs else WINDOW_ROUND)
        with torch.inference_mode():
            self._prepare(requests, sp, mode)
            pending = deque((r, j) for r in (_Request(q, sp.n) for q in requests) for j
                            in range(sp.n))
            t = time.perf_counter()
            tokens = self._fill(pending, sp, out, on_group)
            B = self._compact()
            t = cost.refill(t, len(requests))
            while B:
                if hold is not None and hold():
                    t = time.perf_counter()
                update = poll() if poll is not None else None
                if update is not None:
                    t = cost.reload(t, self._reload(B, pending, *update))
                step_cpu = time.thread_time()
                shape = self._runner.run(B, mode)
                steps, active_sum = steps + 1, active_sum + B
                progress.beat()  # a step made: the hang watchdog's sign of progress
                flags = self._done[:B] if mode.top_p >= 1.0 else self._done[:B] | self._redraw[:B]
                finished = bool(flags.any())  # the one host sync per step
                # RLBENCH_SLOW=decode:F burns here
                hooks.call("decode_step", time.thread_time() - step_cpu)
                t = cost.step(t, B, shape, self._cache_len)
                if finished:
                    if mode.top_p < 1.0:
                        self._redraw_rows(B, sp)
                    tokens += self._retire(self._done[:B].nonzero()[:, 0].tolist(), out, on_group)
                    tokens += self._fill(pending, sp, out, on_group)
                    B = self._compact()
                    t = cost.refill(t)
        self.last_stats = {"decode_steps": steps,
                           "mean_active": active_sum / steps if steps else 0.0,
                           "max_num_seqs": self.max_num_seqs, "tokens_generated": tokens,
                           **cost.stats(),
                           **({"compile": CompileLog.stats()} if self._compiled else {})}
        return out


def build(spec: dict, model_config, eos_token_id: int, max_num_seqs: int, device, make_model,
          state=None,
          own_process_group: bool = False):
    """The registered builder (core/components.py): a sampler owning the model make_model()
    returns."""
    sampler = BuiltinSampler(make_model(), eos_token_id, max_num_seqs=max_num_seqs, device=device,
                             cuda_graphs=spec.get("cuda_graphs"))
    if "decode" in dev.compile_targets(spec.get("compile"), sampler.device.type):
        sampler.compile()
    return sampler
