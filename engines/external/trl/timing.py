"""TRL's steps timed under rlbench's stage names, with rlbench's one timer (record/stages.py
Recorder).

`TimedGRPOTrainer` is TRL's GRPOTrainer with five methods wrapped, nothing else changed; each
wrapper calls TRL's own method inside a stage (or notes a sample fact) and returns its result:

    _generate_single_turn               -> rollout       (model.generate on the rank's generation
                                                         batch, or
                                                          continuous batching's generate_batch: its
                                                          CPU seconds the process's, as it generates
                                                          on a thread)
    the reward function                 -> reward        (rlbench's strict rule, data.py)
    _get_per_token_logps_and_entropies  -> ref_logprob   (the reference model)
                                           old_logprob   (the policy without grad: off-policy steps
                                                         only)
    _prepare_inputs .. training_step    -> update        (TRL's loss forward and backward)
    end of the last backward .. on_step_end -> optimizer_step (grad clip, AdamW, schedule,
    zero_grad)

Time inside a step outside these (TRL's padding, gathers across ranks, advantages, metric
bookkeeping) is in the iteration's wall time but in no stage: it shows as idle. On a GPU every
stage's ends wait for the device (Recorder.stage synchronises; the spans timed here, `mark`, too),
so a stage holds the kernels it queued, and each records the device's busy seconds beside its wall
seconds (Recorder.busy).

An iteration (one generation, train.ppo_mini_batches optimizer steps) starts on_step_begin of its
first step, after a barrier of the ranks (untimed: rlbench's driver starts every rank's iteration at
once), and ends on_step_end of its last; a second barrier then waits for every rank's end, and TRL's
logging and rlbench's evaluation run after it, outside every window.
"""
from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from rlbench.core.devices import busy as busy_clock
from rlbench.core.devices import device as dev
from rlbench.core.record.stages import Stage, now

# a column added to TRL's generation batch: which samples a step trains
SAMPLE_ID = "rlbench_sample"


class StepClock:
    """One rank's view of TRL's steps: the current iteration, its samples, its stage events."""

    def __init__(self, rec, out, steps_per_iteration: int, gate=None, evaluate=None):
        """rec: this rank's Recorder; out: its RankFiles (files.py); gate (rank 0): the turn ring's
        before/after, through the parent; evaluate(done) (rank 0): rlbench's evaluation, after an
        iteration."""
        self.rec, self.out, self.n, self.gate, self.evaluate = (rec, out, steps_per_iteration, gate,
                                                                evaluate)
        self.k = 0  # the iteration in progress
        self.version = 0  # optimizer steps taken: the weights a gradient is taken at
        self.window_start = 0.0
        # mark()s: (clock, thread CPU s, Unix time)
        self.update_start = self.update_end = (0.0, 0.0, 0.0)
        self.rows: list[dict] = []  # this iteration's samples on this rank
        # (reward, iteration, prompt index) of the last call
        self.rewarded: list[tuple[float, int, int]] = []

    # ------------------------------------------------------------- iteration boundaries (the
    # callback's)

    def step_begins(self, global_step: int) -> None:
        if global_step % self.n:
            return
        self.k = global_step // self.n
        if self.gate is not None:
            self.gate.before(self.k)
        _barrier()
        self.window_start = self.mark()[0]

    def mark(self, cpu_clock=time.thread_time) -> tuple[float, float, float]:
        """(clock, CPU seconds by cpu_clock: this thread's, or the process's, Unix time) once the
        device has run what was queued: a span's end."""
        if self.rec.device is not None:
            dev.synchronize(self.rec.device)
        return now(), cpu_clock(), busy_clock.now_unix()

    def span(self, stage: Stage, start: tuple, end: tuple) -> None:
        """The stage from one mark() to another, with its CPU and busy seconds."""
        cpu = end[1] - start[1]
        self.rec.add(stage, self.k, start[0], end[0], cpu, self.rec.busy(cpu, start[2], end[2]))

    def step_ends(self, global_step: int) -> None:
        end = self.mark()
        self.span(Stage.OPTIMIZER_STEP, self.update_end, end)
        self.version = global_step
        if global_step % self.n:
            return
        self.out.window(self.k, self.window_start - self.rec.t0, end[0] - self.rec.t0)
        self.out.samples(self.rows)
        self.rows = []
        # every rank's window closed before rank 0 evaluates (rlbench's driver waits for its ranks)
        _barrier()
        if self.evaluate is not None:
            self.evaluate(self.k + 1)
        if self.gate is not None:
            self.gate.after(self.k)

    # ------------------------------------------------------------- inside a step (the trainer's)

    @contextlib.contextmanager
    def stage(self, stage: Stage, whole_process: bool = False):
        """A stage on rlbench's timer. whole_process: its CPU seconds are the process's, not this
        thread's (transformers' continuous batching generates on a thread of its own while this one
        waits)."""
        if not whole_process:
            with self.rec.stage(stage, self.k):
                yield
            return
        start = self.mark(time.process_time)
        try:
            yield
        finally:
            self.span(stage, start, self.mark(time.process_time))

    def rewards(self, fn):
        """The reward function TRL calls, timed as `reward`; remembers each sample's reward and
        prompt."""
        def reward(completions, answer, iteration, index, **kwargs):
            with self.stage(Stage.REWARD):
                scores = fn(completions, answer, **kwargs)
            self.rewarded = list(zip(scores, iteration, index))
            return scores

        reward.__name__ = fn.__name__  # TRL logs rewards/<name>/mean
        return reward

    def generated(self, batch: dict) -> list[int]:
        """The generation batch TRL built (its prompt and completion masks): one sample row each, in
        the order the reward function saw them; -> their ids."""
        first = len(self.rows)
        prompt_len = batch["prompt_mask"].sum(1).tolist()
        response_len = batch["completion_mask"].sum(1).tolist()
        seen: dict[int, int] = {}
        for (reward, k, index), p, r in zip(self.rewarded, prompt_len, response_len):
            seen[index] = seen.get(index, -1) + 1
            self.rows.append({"iteration": k, "prompt": index, "sample": seen[index],
                              "prompt_len": int(p),
                              "response_len": int(r), "reward": float(reward),
                              "behaviour_version": self.version, "trained_version": None,
                              "finished": None})
        return list(range(first, len(self.rows)))

    def update_begins(self, sample_ids) -> None:
        """A micro-batch is about to be trained at the current weights."""
        for i in sample_ids:
            self.rows[i]["trained_version"] = self.version
        self.update_start = self.mark()

    def update_ends(self) -> None:
        self.update_end = self.mark()
        self.span(Stage.UPDATE, self.update_start, self.update_end)


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def timed_trainer(clock: StepClock):
    """TRL's GRPOTrainer class with its stages timed on `clock` (module docstring); TRL imported
    here."""
    from trl import GRPOTrainer  # inside: optional dependency (trl)

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_single_turn(self, *args, **kwargs):
            with clock.stage(Stage.ROLLOUT,
                             whole_process=self.use_transformers_continuous_batching):
                return super()._generate_single_turn(*args, **kwargs)

        def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
            if torch.is_grad_enabled():  # the loss's own forward: inside update
                return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
            stage = Stage.REF_LOGPROB if model is self.ref_model else Stage.OLD_LOGPROB
            with clock.stage(stage):
                return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)

        def _generate_and_score_completions(self, inputs):
            batch = super()._generate_and_score_completions(inputs)
            # shuffled and split with the batch
            batch[SAMPLE_ID] = torch.tensor(clock.generated(batch))
            return batch

        def _prepare_inputs(self, generation_batch):
            inputs = super()._prepare_inputs(generation_batch)
            if self.model.training:
                clock.update_begins(inputs[SAMPLE_ID].tolist())
            return inputs

        def training_step(self, model, inputs, num_items_in_batch):
            loss = super().training_step(model, inputs, num_items_in_batch)
            clock.update_ends()
            return loss

    return TimedGRPOTrainer


def step_callback(clock: StepClock):
    """The TrainerCallback that marks the iterations' boundaries on `clock`."""
    class StepBoundaries(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock.step_begins(state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            clock.step_ends(state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            clock.out.log(state.global_step, logs or {})

    return StepBoundaries()
