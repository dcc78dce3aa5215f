"""The built-in sampler's decode step as one static-shape function, run at fixed batch sizes
(buckets).

A step advances the slots [a, b) by one token: forward over the whole cache (slot_forward.py
`_step_logits`), a token drawn on the device (sampling.py `draw_static`), and every result written
into preallocated tensors of the sampler (engines/rollout/sampler.py): the token, its log-prob and
weight version, the slot's length and position, its done flag. Nothing in it reads a value back to
the host, allocates a tensor whose shape depends on the data or loops over sequences, so on CUDA
each (bucket, sampling mode) is captured once as a CUDA graph and replayed (core/devices/device.py
`Graph`); elsewhere the same function runs eagerly.

Buckets, as vLLM's CUDA-graph capture sizes: 1, 2, 4, 8, then steps of 8 up to 256 and of 16 beyond,
up to max_num_seqs (itself a bucket) and at most MAX_BUCKET. B live sequences run in the smallest
bucket >= B (the rows past B are free slots: they compute, write only into their own slot and never
finish); more than the largest bucket run as several steps over consecutive slot ranges (split,
never truncated).
"""
from __future__ import annotations

import torch

from rlbench.core.devices import device as dev
from rlbench.engines.rollout.sampling import StepMode, draw, draw_static

# vLLM's largest capture size by default: larger batches are split into steps of at most this
MAX_BUCKET = 512
# an eager step's cache window is a multiple of this: its views are made once per window
WINDOW_ROUND = 16


def batch_buckets(max_num_seqs: int, largest: int = MAX_BUCKET) -> list[int]:
    """The batch sizes a step runs at: [1, 2, 4, 8, 16, 24, ..., 256, 272, ...] below
    min(max_num_seqs, largest), then that size itself."""
    top = min(max_num_seqs, largest)
    sizes = [1, 2, 4] + list(range(8, 257, 8)) + list(range(272, top + 1, 16))
    return [s for s in sizes if s < top] + [top]


def layout(B: int, buckets: list[int], slots: int) -> list[tuple[int, int]]:
    """Live slots 0..B-1 -> the steps that advance them, as slot ranges (a, b): consecutive ranges
    of the largest bucket, then the smallest bucket that holds the rest (cut at `slots`, the slots
    there are)."""
    out, a, top = [], 0, buckets[-1]
    while B - a > top:
        out.append((a, a + top))
        a += top
    size = next(s for s in buckets if s >= B - a)
    out.append((a, min(a + size, slots)))
    return out


class StepRunner:
    """Runs the steps that advance B live slots: each (range, mode) eagerly, or as a CUDA graph
    captured by `prepare` and replayed. `replays` counts graph replays (the micro-benchmark reports
    them per step)."""

    def __init__(self, step, device, graphs: bool, buckets: list[int], slots: int):
        """step(a, b, mode): the step over slots [a, b) (no host sync inside); graphs: capture and
        replay."""
        self.step, self.device, self.graphs = step, device, graphs
        self.buckets, self.slots = buckets, slots
        self._captured: dict = {}  # (a, b, mode) -> device.Graph
        self._modes: set = set()
        self._pool = None
        self.replays = 0

    def ranges(self) -> list[tuple[int, int]]:
        """Every slot range some batch size runs: what `prepare` captures."""
        return sorted({r for B in range(1, self.slots + 1) for r in layout(B, self.buckets,
                                                                           self.slots)},
                      # largest first: the smaller ones reuse its memory
                      key=lambda r: (r[0] - r[1], r[0]))

    def prepare(self, mode: StepMode) -> bool:
        """Capture every range's step for `mode` unless done; -> whether any was captured (the steps
        ran then: the caller resets the slot state they wrote). Eager: nothing to do."""
        if not self.graphs or mode in self._modes:
            return False
        self._modes.add(mode)
        if self._pool is None:
            self._pool = dev.graph_pool(self.device)
        for a, b in self.ranges():
            self._captured[(a, b, mode)] = dev.Graph(lambda a=a, b=b: self.step(a, b, mode),
                                                     self.device,
                                                     self._pool)
        return True

    def clear(self) -> None:
        """Forget the captured graphs (the tensors they read were reallocated)."""
        self._captured.clear()
        self._modes.clear()
        self._pool = None

    def run(self, B: int, mode: StepMode) -> tuple[int, int | None]:
        """Advance live slots 0..B-1 by one token (eagerly: over the cache window their positions
        reach). -> (rows computed: the buckets' sizes, summed; the widest cache window attended,
        None: the whole cache), the shape the step's cost is recorded under (step_costs.py)."""
        rows, widest = 0, 0
        for a, b in layout(B, self.buckets, self.slots):
            graph = self._captured.get((a, b, mode))
            if graph is None:
                window = self.step(a, b, mode, window=not self.graphs)
            else:
                graph.replay()
                self.replays += 1
                window = None
            rows += b - a
            widest = None if window is None or widest is None else max(widest, window)
        return rows, widest


class DecodeStep:
    """The step itself; a mixin of BuiltinSampler, whose `_ensure_cache` allocates what it reads and
    writes: `_tok`, `_pos`, `_ngen`, `_limit` [S] long, `_live` [S] bool, `_unif` [S, M] float64,
    `_out_tok`, `_out_lp`, `_out_ver` [S, M], `_version_t` [1] long, `_done`, `_redraw` [S] bool,
    `_step_logits_buf`."""

    def _slot_views(self, a: int, b: int, length: int | None = None) -> dict:
        """The views of slots [a, b) a step reads and writes, made once per range and cache window
        (slicing is an operator each time; `_views` is emptied when a buffer is reallocated).
        length: attend over cache positions [0, length) only (None: the whole cache)."""
        v = self._views.get((a, b, length))
        if v is None:
            k, L = b - a, length or self._cache_len
            v = {name: getattr(self, "_" + name)[a:b] for name in
                 ("tok", "pos", "ngen", "limit", "live", "done", "redraw", "unif", "out_tok",
                  "out_lp", "out_ver",
                  "rows")}
            v.update(tok_col=v["tok"].view(k, 1), pos_col=v["pos"].view(k, 1),
                     ngen_col=v["ngen"].view(k, 1),
                     version=self._version_t.expand(k, 1),
                     kv=[(kc[a:b, :, :L], vc[a:b, :, :L]) for kc, vc in
                                                               zip(self.k_cache, self.v_cache)],
                     positions=self._arange[:L],
                     logits=None if self._step_logits_buf is None else self._step_logits_buf[a:b])
            self._views[(a, b, length)] = v
        return v

    def _window(self, a: int, b: int) -> int:
        """The cache positions slots [a, b) reach, rounded up to WINDOW_ROUND: one value read back
        from the device (free on CPU, where a step runs eagerly; a captured step attends over the
        whole cache)."""
        reach = int(self._slot_views(a, b)["pos"].max()) + 1
        return min(self._cache_len, -(-reach // WINDOW_ROUND) * WINDOW_ROUND)

    def _step(self, a: int, b: int, mode: StepMode, window: bool = False) -> int | None:
        """Slots [a, b): feed each one's next token, draw the following one, store it; set
        `_done[a:b]` for the live slots that finished (and `_redraw[a:b]` where draw_static could
        not pick the token). window: attend over the positions the slots reach (`_window`), not the
        whole cache: the same tokens (masked positions weigh exactly zero) for attention over ~half
        the cache on average, where the step runs eagerly; False inside a CUDA graph, whose shapes
        are fixed at capture. -> the window attended (None: the whole cache)."""
        length = self._window(a, b) if window else None
        v = self._slot_views(a, b, length)
        logits = self._step_logits(v)  # [k, V] fp32
        # at: column of this token in the output rows
        live, n, at = v["live"], v["ngen"], v["ngen_col"]
        # the token's own uniform
        tok, lp, redraw = draw_static(logits, v["unif"].gather(1, at)[:, 0], mode)
        v["out_tok"].scatter_(1, at, tok[:, None])
        v["out_lp"].scatter_(1, at, lp[:, None])
        v["out_ver"].scatter_(1, at, v["version"])
        v["tok"].copy_(tok)
        done = n + 1 >= v["limit"]
        if mode.eos_stops:
            done |= tok == self.eos_token_id
        torch.logical_and(done, live, out=v["done"])
        if redraw is not None:
            torch.logical_and(redraw, live, out=v["redraw"])
            v["logits"].copy_(logits)
        n.add_(live)  # a free slot stays where it is: its indices stay inside the buffers
        v["pos"].add_(live)
        return length

    def _redraw_rows(self, B: int, sp) -> None:
        """Top-p rows whose nucleus was larger than draw_static's candidates: draw their last token
        again with `draw` (a full sort) and update what the step stored from it. Outside the step
        (host syncs)."""
        rows = self._redraw[:B].nonzero()[:, 0]
        if len(rows) == 0:
            return
        n = self._ngen[rows] - 1  # the step already counted the token
        tok, lp = draw(self._step_logits_buf[rows], self._unif[rows, n], sp)
        self._out_tok[rows, n], self._out_lp[rows, n], self._tok[rows] = tok, lp, tok
        done = n + 1 >= self._limit[rows]
        self._done[rows] = done | (tok == self.eos_token_id) if self._eos_stops else done
        self._redraw[rows] = False
