"""One TRL rank: `python -m rlbench.engines.external.trl.worker SPEC_JSON RANK` (launch.py starts
them).

setup -> train -> cleanup, as every rlbench worker: pinned to its device with one intra-op thread
(the sync placement: a CPU core, or on CUDA the one GPU it sees), torch.distributed through
accelerate (gloo on CPU, NCCL on CUDA; RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment), TRL's
GRPOTrainer built from settings.py with its stages timed (timing.py), rlbench's evaluation on rank
0, on the rank's device, before training and after the iterations rlbench evaluates after.
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import transformers

from rlbench.core.config import RunConfig
from rlbench.core.devices import device as dev
from rlbench.core.devices import peak
from rlbench.core.record.stages import Recorder, Role, Stage
from rlbench.core.results.utilisation import model_shape
from rlbench.engines.data.source import load_dataset
from rlbench.engines.external.trl import settings
from rlbench.engines.external.trl.cost_settings import model_facts, reference_args, resolved_args
from rlbench.engines.external.trl.data import (longest_prompt, strict_gsm8k, train_dataset,
                                               train_rows)
from rlbench.engines.external.trl.export import load_tokenizer, rlbench_tokenizer
from rlbench.engines.external.trl.files import RankFiles
from rlbench.engines.external.trl.gate import RankGate
from rlbench.engines.external.trl.timing import StepClock, step_callback, timed_trainer
from rlbench.engines.factory import evaluate
from rlbench.engines.model.tiny import quiet_transformers
from rlbench.engines.model.weights import build_model
from rlbench.engines.rollout import EVALUATION, build_backend


def main(argv: list[str]) -> None:
    # `kill -USR1 <pid>` prints every thread's stack into the rank's log
    faulthandler.register(signal.SIGUSR1)
    spec_path, rank = argv
    rank = int(rank)
    spec = json.loads(Path(spec_path).read_text())
    kind = spec.get("kind", "cpu")
    # before torch does any work: its core, or its one visible GPU (device 0 here: launch.py), one
    # intra-op thread
    dev.pin(kind, rank if kind == "cpu" else 0, 1)
    train(spec, rank)  # leaves the process itself (os._exit) once its files are closed


def train(spec: dict, rank: int) -> None:
    quiet_transformers()
    cfg = RunConfig.model_validate(spec["config"])
    out = RankFiles(Path(spec["folder"]), rank)
    dataset = load_dataset(cfg.data, cfg.run.seed)
    trainer, clock, reference = build(spec, cfg, dataset, rank, out)
    out.observed(observation(trainer, rank, reference))
    if rank == 0:
        clock.evaluate(0)
        clock.gate.ready()
    trainer.train()
    if rank == 0:
        clock.gate.leave()
    _finish()
    out.close()
    # Leave here, with the trainer still referenced: freeing it (DDP's reducer, gloo's context)
    # after the process group was destroyed was seen to block a rank for good in a native wait, so
    # neither this frame's unwinding nor the interpreter's teardown runs.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def build(spec: dict, cfg, dataset, rank: int, out):
    """-> (TRL's GRPOTrainer with its stages timed, the StepClock it reports to, the reference its
    resolved arguments are diffed against: a GRPOConfig built from the translation alone,
    cost_settings.py)."""
    from trl import GRPOConfig  # inside: optional dependency (trl)

    model_dir = Path(spec["model_dir"])
    tok, rtok = load_tokenizer(model_dir, cfg), rlbench_tokenizer(model_dir, cfg)
    # rlbench's rule: the template where there is one
    chat = bool(getattr(rtok, "use_chat_template", False))
    rows = train_rows(cfg, dataset, chat)
    kind = spec.get("kind", "cpu")
    kwargs = settings.named_for(GRPOConfig, settings.grpo_kwargs(
        cfg, spec["world"], str(Path(spec["folder"]) / "output"),
        settings.TrlOptions(**spec["options"]),
        longest_prompt(tok, rows), kind), getattr(transformers, "ContinuousBatchingConfig", None))
    args, reference = GRPOConfig(**kwargs), reference_args(GRPOConfig, kwargs)
    rec = Recorder(f"{Role.COLOCATED.value}{rank}", spec["t0"], device=rank_device(kind), devices=1,
                   sink=out.event)
    gate = RankGate(*spec["gate"]) if rank == 0 else None
    clock = StepClock(rec, out, settings.mini_batches(cfg), gate)
    trainer = timed_trainer(clock)(
        model=str(model_dir), reward_funcs=[clock.rewards(strict_gsm8k)], args=args,
        train_dataset=train_dataset(rows), processing_class=tok,
        callbacks=[step_callback(clock)])
    if rank == 0:
        eval_rec = Recorder(Role.EVAL.value, spec["t0"], sink=out.event)
        clock.evaluate = Evaluation(trainer.model, cfg, dataset, rtok, eval_rec, out, clock)
    return trainer, clock, reference


class Evaluation:
    """rlbench's evaluation (greedy pass@1, strict rule, the eval split) of TRL's current policy,
    with rlbench's built-in sampler on this rank's core; timed as `eval`, outside every
    iteration."""

    def __init__(self, model, cfg, dataset, tok, rec, out, clock):
        self.model, self.cfg, self.dataset, self.tok, self.rec, self.out = (model, cfg, dataset,
                                                                            tok, rec, out)
        self.clock = clock
        self.sampler = None

    def due(self, done: int) -> bool:
        every = self.cfg.run.eval_every
        return done in (0, self.cfg.run.iterations) or bool(every and done % every == 0)

    def __call__(self, done: int) -> None:
        if not self.due(done):
            return

        if self.sampler is None:
            self.sampler = self._sampler()
        with self.rec.stage(Stage.EVAL, done), torch.no_grad():
            weights = {n: p.detach() for n, p in self.model.named_parameters()}
            res = evaluate(self.sampler, weights, self.clock.version, self.cfg, self.dataset,
                           self.tok)
        self.out.eval({"iteration": done, **res})

    def _sampler(self):
        # the rank's device
        config, device = self.model.config, next(self.model.parameters()).device
        return build_backend(EVALUATION, config, self.tok.eos_token_id,
                             self.cfg.rollout.max_num_seqs, device,
                             lambda: build_model(config, device))


def observation(trainer, rank: int, reference: dict) -> dict:
    """What this rank was given (checked against the plan by the adapter), with the model's shape,
    the device and its measured peak on rank 0 (results.json provenance and the per-stage
    utilisation), and what TRL resolved: its trainer's arguments after it was built, every field,
    and what its model says about the cost settings, beside the reference its arguments are diffed
    against (cost_settings.py)."""
    model = trainer.model
    device = next(model.parameters()).device
    # the run's session (launch.py)
    info = {**dev.observe(device.type), "pid": os.getpid(), "session": os.getsid(0)}
    if rank == 0:
        info.update(shape=model_shape(model), device=dev.describe(device),
                    peak=peak.peak(device, model.dtype),
                    parameters=sum(p.numel() for p in model.parameters()),
                    trl_args=resolved_args(trainer.args), model_facts=model_facts(model),
                    rlbench_args=reference)
    return info


def rank_device(kind: str):
    """The torch device this rank's work runs on: the CPU, or its one visible GPU."""
    return torch.device("cpu") if kind == "cpu" else torch.device(kind, 0)


def _finish() -> None:
    if dist.is_initialized():
        dist.barrier()  # rank 0 may still be evaluating; nobody tears down under it
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
