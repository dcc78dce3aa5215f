"""torch.profiler traces per worker, for a few iterations (`rlbench run --profile`).

Traces land in <cell>/traces/ as TensorBoard-loadable files (`tensorboard --logdir <cell>/traces`
with torch-tb-profiler) that are also Chrome/Perfetto traces (*.pt.trace.json). The stage recorder's
ranges show up in them because `Recorder.stage` opens a record_function (NVTX on CUDA, MSTX on NPU)
range: one timer feeds metrics and profiler alike.
"""
from __future__ import annotations

import contextlib
import os

import torch.profiler as tp

ENV_DIR = "RLBENCH_PROFILE_DIR"  # read by rollout worker processes
ENV_ITERS = "RLBENCH_PROFILE_ITERS"  # "first,count"


class IterationProfiler:
    """Profiles iterations [first, first + count) of one worker; `step()` after each iteration."""

    def __init__(self, trace_dir: str | None, worker: str, first: int, count: int, device_type: str = "cpu"):
        self.prof = None
        if not trace_dir or count <= 0:
            return
        acts = [tp.ProfilerActivity.CPU]
        if device_type == "cuda":
            acts.append(tp.ProfilerActivity.CUDA)
        os.makedirs(trace_dir, exist_ok=True)
        self.prof = tp.profile(
            activities=acts, schedule=tp.schedule(wait=first, warmup=0, active=count, repeat=1),
            on_trace_ready=tp.tensorboard_trace_handler(trace_dir, worker_name=worker), record_shapes=False)
        self.prof.__enter__()

    def step(self) -> None:
        if self.prof is not None:
            self.prof.step()

    def close(self) -> None:
        if self.prof is not None:
            with contextlib.suppress(Exception):
                self.prof.__exit__(None, None, None)
            self.prof = None


def from_env(worker: str, device_type: str = "cpu") -> IterationProfiler:
    """The profiler a worker process should run, as its parent asked through the environment."""
    first, count = (int(x) for x in os.environ.get(ENV_ITERS, "0,0").split(","))
    return IterationProfiler(os.environ.get(ENV_DIR), worker, first, count, device_type)


def export_env(trace_dir: str, first: int, count: int) -> None:
    os.environ[ENV_DIR] = trace_dir
    os.environ[ENV_ITERS] = f"{first},{count}"
