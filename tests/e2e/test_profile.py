"""`rlbench run --profile`: per-worker torch.profiler traces that TensorBoard's profiler plugin loads."""
import json

import pytest

from conftest import TINY
from support.cli import rlbench


@pytest.mark.e2e
def test_profile_traces_load_in_tensorboard_plugin(tmp_path):
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   "--no-report", "--profile", "--set", "engine.schedule=periodic_async",
                   "--set", "run.profile_iterations=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    traces = sorted((run_dir / "periodic_async" / "traces").glob("*.pt.trace.json"))
    workers = {t.name.split(".")[0] for t in traces}
    assert workers == {"driver", "trainer0", "rollout0"}, traces
    for t in traces:  # Chrome/Perfetto trace format, with the stage recorder's ranges in it
        names = {e.get("name") for e in json.loads(t.read_text())["traceEvents"]}
        assert names & {"rollout", "update", "weight_sync", "queue_wait"}, t  # the driver only waits
    from torch_tb_profiler.profiler.data import RunProfileData

    for worker in workers:  # the operator table beside each trace: names, host time, call counts
        table = (run_dir / "periodic_async" / "traces" / f"{worker}.ops.txt").read_text()
        assert f"{worker}: operators by self_cpu_time_total" in table and "# of Calls" in table
    trainer_ops = (run_dir / "periodic_async" / "traces" / "trainer0.ops.txt").read_text()
    assert "aten::mm" in trainer_ops or "aten::addmm" in trainer_ops  # the model's matmuls were profiled
    trainer = next(t for t in traces if t.name.startswith("trainer"))
    profile = RunProfileData.parse("trainer", None, str(trainer), str(tmp_path / "cache"))
    assert profile.has_runtime or profile.events  # the plugin parsed the events


def test_the_training_window_profiles_one_iterations_training_stages_only(tmp_path):
    """RLBENCH_PROFILE_WINDOW=train (the prepared GPU command's short window): the profiled iteration's
    stages from its first log-prob pass to its optimizer step, not its rollout nor any other iteration's."""
    import time

    import torch

    from rlbench.core.record.profiling import IterationProfiler
    from rlbench.core.record.stages import Recorder, Stage

    prof = IterationProfiler(str(tmp_path), "trainer0", first=1, count=1, window=True)
    rec = Recorder("trainer0", time.monotonic(), device=torch.device("cpu"))
    prof.attach(rec)
    table = tmp_path / "trainer0.ops.txt"
    a = torch.randn(32, 32)
    for k in range(3):
        for stage in (Stage.ROLLOUT, Stage.OLD_LOGPROB, Stage.REF_LOGPROB, Stage.UPDATE, Stage.OPTIMIZER_STEP):
            with rec.stage(stage, k):
                (a @ a).sum()
        prof.step()
        assert table.exists() == (k >= 1), k  # written as iteration 1's optimizer step ends
    prof.close()
    rows = {line.split()[0]: line.split() for line in table.read_text().splitlines() if line.strip()}
    assert "rollout" not in rows and "aten::mm" in rows
    for stage in ("old_logprob", "ref_logprob", "update", "optimizer_step"):
        assert rows[stage][-1] == "1", rows.get(stage)  # one iteration's: each stage range once
