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
