"""Per-iteration curves for TensorBoard and Weights & Biases (`run.logger`, `rlbench run --logger`).

A cell process writes, after each iteration, the scalars of the IterationRecord that has just gone
to iterations.jsonl, under VERL's metric names where VERL has one (docs/metrics.md, "Per-iteration
curves"), so an rlbench cell and a VERL run can be laid side by side in the tool their users already
follow. Nothing is measured or computed here: every value is a field of the record (VERL's
`update_actor` is the sum of two of them). One TensorBoard run and one W&B run per cell, so the
cells of a run overlay: `<run folder>/tensorboard/<cell>/` and `<run folder>/wandb/<cell>/`. Step =
iterations done, as VERL counts its steps: the evaluation before training is step 0, iteration k
(0-based) is step k + 1. tensorboard and wandb are imported only when a cell writes curves.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from rlbench.core.errors import UserError

# neither pulls torch
INSTALL = {"tensorboard": "pip install tensorboard", "wandb": "pip install wandb"}
# under the run folder, one sub-folder per cell
FOLDER = {"tensorboard": "tensorboard", "wandb": "wandb"}
# rlbench stage -> VERL's timer (logged by VERL as timing_s/<timer>,
# verl/trainer/ppo/ray_trainer.py).
VERL_TIMERS = {"rollout": "gen", "reward": "reward", "old_logprob": "old_log_prob",
               "ref_logprob": "ref",
               "advantage": "adv", "weight_sync": "update_weights"}
# VERL's update_actor timer covers forward, backward and the optimizer step: rlbench's two stages.
UPDATE_ACTOR = ("update", "optimizer_step")
# VERL's GSM8K data source ("openai/gsm8k", examples/data_preprocess/gsm8k.py): its validation curve
# is val-core/<source>/reward/mean@1, the greedy pass@1 with the rule reward, which rlbench's
# accuracy is.
VAL_SOURCE = {"gsm8k": "openai/gsm8k"}


def check_installed(cfg) -> None:
    """Before any work starts: every logger of run.logger can be imported (exit 2 with the install
    command)."""
    for name in cfg.run.logger:
        if importlib.util.find_spec(name) is None:
            raise UserError(f"run.logger / --logger {name}: the {name} package is not installed in "
                            f"this environment; install it with `{INSTALL[name]}`")


def refuse_external(cfg, engine: str) -> None:
    """An external engine logs with its own trackers (VERL: trainer.logger); rlbench writes no
    curves for it."""
    if cfg.run.logger:
        raise UserError(f"run.logger / --logger {','.join(cfg.run.logger)}: only with --engine "
                        f"rlbench ({engine} has its own loggers)")


def scalars(rec: dict) -> dict[str, float]:
    """An IterationRecord (as in iterations.jsonl) -> {tag: value}, VERL's tags where VERL has
    one."""
    out = {"perf/throughput": rec["tpspd"], "perf/total_num_tokens": rec["tokens"],
           "perf/time_per_step": rec["wall_s"], "timing_s/step": rec["wall_s"],
           "critic/score/mean": rec["reward_mean"],
           "response_length/mean": rec["response_len_mean"],
           "response_length/max": rec["response_len_max"], "actor/kl_loss": rec["kl"],
           "actor/grad_norm": rec["grad_norm"], "rlbench/actor/loss": rec["loss"],
           "rlbench/staleness/max": rec["staleness_max"],
           "rlbench/staleness/mean": rec["staleness_mean"],
           "rlbench/perf/rollout_tokens_per_s": rec["rollout_tokens_per_s"],
           "rlbench/perf/train_tokens_per_s": rec["train_tokens_per_s"],
           "rlbench/warmup": int(rec["warmup"])}
    out.update(_timings(rec["stage_s"]))
    out.update({f"rlbench/idle_frac/{worker}": v for worker, v in rec["idle_frac"].items()})
    for key, tag in (("rollout_occupancy", "rlbench/rollout/occupancy"),
                     ("behav_imp_weight", "rlbench/actor/behav_imp_weight"),
                     ("behav_capped", "rlbench/actor/behav_capped")):
        if rec.get(key) is not None:  # only where the schedule has it
            out[tag] = rec[key]
    return {tag: float(v) for tag, v in out.items()}


def _timings(stage_s: dict[str, float]) -> dict[str, float]:
    """Stage seconds (summed over the workers that ran the stage, as recorded) under VERL's timer
    names; stages VERL has no timer for keep their own name under rlbench/timing_s/."""
    out = {f"timing_s/{VERL_TIMERS[s]}" if s in VERL_TIMERS else f"rlbench/timing_s/{s}": v
           for s, v in stage_s.items() if s not in UPDATE_ACTOR}
    update = [s for s in UPDATE_ACTOR if s in stage_s]
    if update:
        out["timing_s/update_actor"] = sum(stage_s[s] for s in update)
        # the split VERL does not show
        out.update({f"rlbench/timing_s/{s}": stage_s[s] for s in update})
    return out


def val_tag(data_source: str) -> str:
    """The evaluation's accuracy tag, as VERL names its core validation metric."""
    return f"val-core/{VAL_SOURCE.get(data_source, data_source)}/reward/mean@1"


class Curves:
    """One cell's curve writers (none when run.logger is empty): `evaluation` and `iteration` write
    one step each and flush it, so the curves grow while the run goes; `close` at the end of the
    cell."""

    def __init__(self, cfg, cell_folder: Path, cell: str):
        folder = Path(cell_folder)
        run_dir, self.val = folder.parent, val_tag(cfg.data.source)
        opened = {"tensorboard": lambda d: _TensorBoard(d),
                  "wandb": lambda d: _WandB(d, cell, run_dir.name, cfg.model_dump(mode="json"))}
        self.writers = [opened[name](run_dir / FOLDER[name] / folder.name) for name
                        in cfg.run.logger]

    def evaluation(self, done: int, accuracy: float) -> None:
        """The accuracy measured after `done` iterations (0: before training), at step `done`."""
        self._write(done, {self.val: float(accuracy)})

    def iteration(self, rec: dict) -> None:
        """Iteration rec["iteration"]'s record at step iteration + 1 (its evaluation, where it has
        one)."""
        if not self.writers:
            return
        tags = scalars(rec)
        if rec.get("eval_accuracy") is not None:
            tags[self.val] = float(rec["eval_accuracy"])
        self._write(rec["iteration"] + 1, tags)

    def _write(self, step: int, tags: dict[str, float]) -> None:
        for w in self.writers:
            w.write(step, tags)

    def close(self) -> None:
        for w in self.writers:
            w.close()
        self.writers = []


class _TensorBoard:
    def __init__(self, folder: Path):
        # inside: optional dependency (the tensorboard package, run.logger=tensorboard), and torch
        from torch.utils.tensorboard import SummaryWriter

        # a cell run again (--resume) starts its curves afresh
        shutil.rmtree(folder, ignore_errors=True)
        self.writer = SummaryWriter(log_dir=str(folder))

    def write(self, step: int, tags: dict[str, float]) -> None:
        for tag, value in tags.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # live curves: on disk before the next iteration starts

    def close(self) -> None:
        self.writer.close()


class _WandB:
    """Offline only: nothing leaves the machine; `wandb sync <run
    folder>/wandb/<cell>/wandb/offline-run-*` uploads a run later."""

    def __init__(self, folder: Path, cell: str, group: str, config: dict):
        import wandb  # inside: optional dependency (run.logger=wandb)

        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        # console off: wandb would otherwise wrap this process's stdout and stderr; stats off: no
        # sampling thread competing with the measured workers for the cores
        self.run = wandb.init(mode="offline", dir=str(folder), project="rlbench", group=group,
                              name=cell,
                              config=config,
                              settings=wandb.Settings(console="off", x_disable_stats=True,
                                                                     silent=True))

    def write(self, step: int, tags: dict[str, float]) -> None:
        self.run.log(tags, step=step)

    def close(self) -> None:
        self.run.finish()
