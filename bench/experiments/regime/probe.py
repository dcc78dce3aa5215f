"""The cores slowing each other, measured: a calibration step of the regime map's run (`--ablation
regime`).

The speedup prediction reads its costs from the sync cell, where both ranks compute at once, while
the barrier's trainer and rollout worker each run alone and periodic-async's run together only part
of the time. How much a decode step and a training pass slow down while the other core computes is
measured here, before the cells, on the same two cores, in two worker processes pinned as the cells'
workers are (one core, one thread each), with a model of the run's shape (random weights: speed does
not depend on them):

  phase 1: core 0 decodes alone (the built-in sampler, B sequences of fixed length), core 1 idle
  phase 2: core 1 trains alone (forward + backward of [rows, length] micro-batches), core 0 idle
  phase 3: both at once

-> contention_probe.json: each side's work per second alone and together, and kappa = alone /
together
- 1 (a stage runs at 1 / (1 + kappa) of its alone speed while the other core computes), read by the
contention term of the prediction (core/costmodel/contention.py). Nothing here is an async cell.
"""
from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import typer
from rlbench.core.config import ModelConfig
from rlbench.core.devices import device as dev
from rlbench.core.experiments.spec import Runner
from rlbench.core.results import schema

FILE = schema.CONTENTION_PROBE
PROBED = ("regime",)  # the ablations that run it first
PHASE_S = 3.0  # seconds per phase
# Representative of the map: a sync rank's share of a p8 point in flight, a group's micro-batch of 4
# rows
DECODE = {"sequences": 16, "prompt_len": 80, "new_tokens": 48}
TRAIN = {"rows": 4, "length": 256}
PHASES = (("decode", True, False), ("train", False, True), ("both", True, True))


def _work(side: str, mcfg: dict, core: int, barrier, out, phase_s: float, decode: dict,
          train: dict) -> None:
    """One probe worker: pinned to `core`, runs its side's unit of work while its phase says so."""
    # inside: torch and the engines, needed in the probe's worker processes only; every `rlbench
    # run` and cell process loads this module (the experiments' runners), most of them for another
    # ablation
    import torch
    from rlbench.engines.model.tiny import build_tiny
    from rlbench.engines.rollout.base import PromptRequest
    from rlbench.engines.rollout.sampler import BuiltinSampler
    from rlbench.engines.rollout.sampling import LengthSampling

    dev.pin("cpu", core, 1)
    model = build_tiny(ModelConfig(**mcfg), vocab_size=128, seed=0)
    if side == "decode":
        sampler = BuiltinSampler(model, 2, max_num_seqs=decode["sequences"])
        requests = [PromptRequest(i, [3 + (i + t) % 120 for t in range(decode["prompt_len"])])
                    for i in range(decode["sequences"])]
        params = LengthSampling(n=1, max_new_tokens=decode["new_tokens"], seed=0,
                                response_length="fixed",
                                response_length_mean=decode["new_tokens"])

        def unit() -> int:  # tokens generated
            return sum(len(r) for g in sampler.generate(requests, params) for r in g.responses)
    else:
        model.train()
        ids = torch.randint(3, 120, (train["rows"], train["length"]))

        def unit() -> int:  # positions trained
            model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
            model.zero_grad(set_to_none=True)
            return ids.numel()

    unit()  # warm: first-call allocations and kernel choices outside the timing
    rates = {}
    for phase, *active in PHASES:
        barrier.wait()
        if not active[side == "train"]:
            time.sleep(phase_s)
            continue
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < phase_s:
            done += unit()
        rates[phase] = done / (time.perf_counter() - t0)
    out.put((side, rates))


def measure(model_cfg: dict, run_dir: Path, cores: tuple[int, int] = (0, 1),
            phase_s: float = PHASE_S,
            decode: dict = DECODE, train: dict = TRAIN) -> dict:
    """Run the three phases in two pinned processes (cores: positions in this process's affinity
    mask, as the cells' workers are placed); write and return contention_probe.json's record."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_work,
                         args=(side, model_cfg, core, barrier, out, phase_s, decode, train),
                         name=f"rlbench-probe-{side}", daemon=True)
             for side, core in zip(("decode", "train"), cores)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    try:
        got = dict(out.get(timeout=300) for _ in procs)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    record = {"schema_version": schema.SCHEMA_VERSION, "cores": list(cores), "phase_s": phase_s,
              "decode_workload": decode, "train_workload": train,
              "wall_s": round(time.monotonic() - t0, 1)}
    for side, alone in (("decode", "decode"), ("train", "train")):
        r = got[side]
        record[side] = {"alone_per_s": r[alone], "together_per_s": r["both"],
                        "kappa": max(0.0, r[alone] / r["both"] - 1.0) if r["both"] else None}
    schema.atomic_write_json(Path(run_dir) / FILE, record)
    return record



def calibrate(name: str, base, run_dir: Path) -> None:
    """The calibration step of `--ablation regime`, before its cells: how much decode and training
    slow each other on two cores. Where it cannot run (not CPU, fewer than 2 cores, a model other
    than the tiny one) or fails, the prediction keeps the sync cell's own estimate; nothing is
    lost."""
    if (
        name not in PROBED
        or base.engine.device != "cpu"
        or base.model.kind != "tiny"
        or len(dev.cpu_cores()) < 2
    ):
        return
    typer.echo("rlbench: contention probe: decode and training alone and together on the first two "
               "cores (~20 s)",
               err=True)
    try:
        r = measure(base.model.model_dump(mode="json"), run_dir)
    except Exception as e:  # a calibration that failed must not cost the map
        typer.echo(f"rlbench: contention probe failed ({e}); the prediction uses the sync cell's "
                   f"estimate", err=True)
        return
    typer.echo(f"rlbench: contention probe: decode {r['decode']['kappa']:+.0%} slower and training "
               f"{r['train']['kappa']:+.0%} slower while the other core computes", err=True)


RUNNER = Runner(before=calibrate)
