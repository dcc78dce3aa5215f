"""torch.profiler traces per worker, for a few iterations (`rlbench run --profile`).

Traces land in <cell>/traces/ as TensorBoard-loadable files (`tensorboard --logdir <cell>/traces`
with torch-tb-profiler) that are also Chrome/Perfetto traces (*.pt.trace.json). The stage recorder's
ranges show up in them because `Recorder.stage` opens a record_function (NVTX on CUDA, MSTX on NPU)
range: one timer feeds metrics and profiler alike. Beside each trace, `<worker>.ops.txt`: the
operators of the profiled iterations by their own host time (and, on CUDA, device time), with call
counts: where a host-bound step spends its time, readable without a trace viewer and small enough to
bring back from a GPU machine whose traces are not.
"""
from __future__ import annotations

import contextlib
import os

import torch.profiler as tp

from rlbench.core.record.stages import Stage

ENV_DIR = "RLBENCH_PROFILE_DIR"  # read by rollout worker processes
ENV_ITERS = "RLBENCH_PROFILE_ITERS"  # "first,count"
# "0": write the operator tables only, no trace (a GPU iteration's trace is tens of MB and slow to
# write; the prepared GPU command sets it, as its archive leaves traces behind anyway)
ENV_TRACE = "RLBENCH_PROFILE_TRACE"
OPS_ROWS = 40  # operators listed per table in <worker>.ops.txt


# "train": a short window, from the first log-prob or update pass of the profiled iterations to the
# end of the last one's optimizer step (the trainer's work, no rollout); a worker that trains
# nothing profiles nothing
ENV_WINDOW = "RLBENCH_PROFILE_WINDOW"
WINDOW_OPENS = (Stage.OLD_LOGPROB.value, Stage.REF_LOGPROB.value, Stage.UPDATE.value)
WINDOW_CLOSES = Stage.OPTIMIZER_STEP.value


class IterationProfiler:
    """Profiles iterations [first, first + count) of one worker; `step()` after each iteration.
    window (RLBENCH_PROFILE_WINDOW=train when None): only their training stages, opened and closed
    by the worker's Recorder (`attach`)."""

    def __init__(self, trace_dir: str | None, worker: str, first: int, count: int,
                 device_type: str = "cpu",
                 window: bool | None = None):
        self.prof, self.on = None, False
        self.window = os.environ.get(ENV_WINDOW) == "train" if window is None else window
        self.first, self.last = first, first + count - 1
        if not trace_dir or count <= 0:
            return
        acts = [tp.ProfilerActivity.CPU]
        if device_type == "cuda":
            acts.append(tp.ProfilerActivity.CUDA)
        os.makedirs(trace_dir, exist_ok=True)
        ready = _writer(trace_dir, worker, device_type)
        if self.window:  # started and stopped by the stages (entered / left)
            self.prof = tp.profile(activities=acts, on_trace_ready=ready, record_shapes=False)
            return
        self.prof = tp.profile(
            activities=acts, schedule=tp.schedule(wait=first, warmup=0, active=count, repeat=1),
            on_trace_ready=ready, record_shapes=False)
        self.prof.__enter__()

    def attach(self, rec) -> None:
        """Let the worker's Recorder open and close the window (window mode only)."""
        if self.window and self.prof is not None:
            rec.watcher = self

    def entered(self, stage: str, iteration: int) -> None:
        if (
            not self.on
            and self.prof is not None
            and stage in WINDOW_OPENS
            and self.first <= iteration <= self.last
        ):
            self.prof.start()
            self.on = True

    def left(self, stage: str, iteration: int) -> None:
        if self.on and stage == WINDOW_CLOSES and iteration >= self.last:
            self.close()

    def step(self) -> None:
        if self.prof is not None and not self.window:
            self.prof.step()

    def close(self) -> None:
        """Stop profiling; a window still open (a run cut short) is written as it stands."""
        if self.prof is not None and (self.on or not self.window):
            with contextlib.suppress(Exception):
                self.prof.stop() if self.window else self.prof.__exit__(None, None, None)
        self.prof, self.on = None, False


def _writer(trace_dir: str, worker: str, device_type: str):
    """on_trace_ready: the operator tables (`<worker>.ops.txt`: on CUDA by device time first), then
    the trace (TensorBoard / Chrome format) unless RLBENCH_PROFILE_TRACE=0. The tables first: a step
    cut by its time limit while the trace is written still has them."""
    trace = tp.tensorboard_trace_handler(trace_dir, worker_name=worker)
    # on CUDA also the device time with children: the stage ranges (old_logprob, ref_logprob,
    # update) with the device time of the kernels launched inside them
    keys = (["self_device_time_total", "device_time_total"] if device_type == "cuda" else []) + \
        ["self_cpu_time_total"]

    def ready(prof) -> None:
        ops = prof.key_averages()
        with open(os.path.join(trace_dir, f"{worker}.ops.txt"), "w") as f:
            for key in keys:
                f.write(f"{worker}: operators by {key} (top {OPS_ROWS})\n")
                f.write(ops.table(sort_by=key, row_limit=OPS_ROWS) + "\n")
                f.flush()
        if os.environ.get(ENV_TRACE, "1") != "0":
            trace(prof)
    return ready


def from_env(worker: str, device_type: str = "cpu") -> IterationProfiler:
    """The profiler a worker process should run, as its parent asked through the environment."""
    first, count = (int(x) for x in os.environ.get(ENV_ITERS, "0,0").split(","))
    return IterationProfiler(os.environ.get(ENV_DIR), worker, first, count, device_type)


def export_env(trace_dir: str, first: int, count: int) -> None:
    os.environ[ENV_DIR] = trace_dir
    os.environ[ENV_ITERS] = f"{first},{count}"
