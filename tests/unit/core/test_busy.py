"""The device's busy time per stage, recorded by the one timer beside the wall time (core/devices/busy.py):
a stage that waits shows little, one that computes shows most of its wall time; iteration records and the
aggregates carry it; the CUDA clock (NVML) is checked the same way on a GPU."""
from __future__ import annotations

import time

import pytest
import torch

from rlbench.core.devices import busy
from rlbench.core.record.stages import Recorder, Stage
from rlbench.core.results.metrics import aggregate, build_iteration


def _spin(seconds: float) -> None:
    """Work on this thread (no thread pool) for `seconds` of its own CPU time (a shared core may stretch the
    wall time)."""
    t0, x = time.thread_time(), 0
    while time.thread_time() - t0 < seconds:
        x = sum(i * i for i in range(1000)) + x % 7


def _events(device) -> list[dict]:
    rec = Recorder("trainer0", time.monotonic(), device=device)
    with rec.stage(Stage.QUEUE_WAIT, 0):
        time.sleep(0.3)
    with rec.stage(Stage.UPDATE, 0):
        _spin(0.3)
    return [vars(e) for e in rec.drain()]


def test_on_cpu_a_waiting_stage_is_idle_and_a_computing_one_busy():
    wait, work = _events(torch.device("cpu"))
    assert wait["busy"] == wait["cpu"] and work["busy"] == work["cpu"]  # the CPU clock: the thread's CPU seconds
    assert wait["busy"] / (wait["end"] - wait["start"]) < 0.1
    # 0.3 CPU seconds of work: at least that busy; the wall time is longer where other processes hold the
    # cores (the development machine's 2 cores are shared: 0.28 seen under load), never 5x longer here
    busy_frac = work["busy"] / (work["end"] - work["start"])
    assert work["busy"] >= 0.3 and busy_frac > 0.2 and busy_frac > 5 * wait["busy"] / (wait["end"] - wait["start"])


def test_iteration_records_and_aggregates_carry_busy_and_wall_seconds_per_stage():
    events = _events(torch.device("cpu")) + [  # an event that measured nothing (an external engine's): left out
        {"worker": "rollout0", "stage": "rollout", "iteration": 0, "start": 0.0, "end": 0.2, "busy": None}]
    it = build_iteration(0, events, [], 1, {}, warmup=False)
    wait, work = events[0], events[1]
    assert set(it.stage_busy) == {"queue_wait", "update"}  # rollout: not measured
    assert it.stage_busy["update"] == {"busy_s": work["busy"], "wall_s": work["end"] - work["start"]}
    agg = aggregate([vars(it)] * 2, [])
    assert agg["busy_frac"]["update"] == pytest.approx(work["busy"] / (work["end"] - work["start"]))
    assert agg["busy_frac"]["queue_wait"] < 0.1 and "rollout" not in agg["busy_frac"]


def test_nvml_samples_inside_the_stage_give_its_busy_seconds():
    samples = [(100, 90.0), (200, 20.0), (300, 40.0), (400, 100.0)]  # (µs, % of the period a kernel ran)
    assert busy.busy_seconds(samples, 150, 350, wall_s=2.0) == pytest.approx(2.0 * 0.30)  # 20% and 40%
    assert busy.busy_seconds(samples, 400, 500, wall_s=1.0) is None  # no sample inside: not measured
    assert busy.busy_seconds([(5, 130.0)], 0, 10, wall_s=1.0) == 1.0  # never above the wall time


def test_a_gpu_is_found_in_nvml_by_its_uuid_whichever_way_it_is_written():
    class Raw:  # torch's device property: an object holding the 16 bytes
        bytes = bytes(range(16))
    assert busy._uuid_text(Raw()) == busy._uuid_text("GPU-00010203-0405-0607-0809-0A0B0C0D0E0F") \
        == "00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_the_clock_follows_the_device():
    assert isinstance(busy.clock(None), busy.CpuClock) and isinstance(busy.clock(torch.device("cpu")), busy.CpuClock)
    assert busy.clock(torch.device("meta")) is None  # a device rlbench cannot ask: not measured


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_nvml_shows_a_sleeping_stage_idle_and_a_matmul_stage_busy():
    device = torch.device("cuda", torch.cuda.current_device())
    clock = busy.clock(device)
    assert isinstance(clock, busy.NvmlClock), "NVML (libnvidia-ml.so.1) did not answer for this GPU"
    rec = Recorder("trainer0", time.monotonic(), device=device)
    a = torch.randn(4096, 4096, device=device)
    with rec.stage(Stage.QUEUE_WAIT, 0):
        time.sleep(1.5)
    with rec.stage(Stage.UPDATE, 0):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            for _ in range(20):
                a = torch.tanh(a @ a)
            torch.cuda.synchronize(device)
    wait, work = rec.drain()
    assert wait.busy is not None and work.busy is not None, (wait, work)
    assert wait.busy / wait.duration < 0.3 and work.busy / work.duration > 0.7, (wait, work)


def test_the_report_shows_one_busy_column_per_stage_labelled_by_its_clock():
    import pandas as pd

    from rlbench.reports.tables import _busy, busy_markdown

    df = pd.DataFrame([{"cell": "sync", "busy_rollout_pct": 12.0, "busy_update_pct": 97.4, "busy_clock": "GPU"},
                       {"cell": "cpu", "busy_rollout_pct": 55.0, "busy_update_pct": None, "busy_clock": "CPU"}])
    table = "\n".join(busy_markdown(df))
    assert "| cell | busy % | rollout | update |" in table
    assert "| sync | GPU busy % | 12 | 97 |" in table and "| cpu | CPU busy % | 55 | – |" in table
    assert _busy(df.to_dict("records")[0]) == "GPU: rollout 12, update 97"
    assert busy_markdown(pd.DataFrame([{"cell": "old"}])) == []  # results from before: no table
