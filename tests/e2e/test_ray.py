"""engine.launcher=ray: the same worker classes as Ray actors (engines/hosts.py), one code path.

On a local Ray instance the run must train exactly like the local processes (bitwise: the same dealing
and the same all-reduce), record the same workers' events and turn a dead actor into exit code 3 with
the measured iterations kept and no actor left behind.
"""
import pytest

ray = pytest.importorskip("ray", reason="engine.launcher=ray needs Ray: pip install 'rlbench[ray]'")

import torch  # noqa: E402

from rlbench.core.results import schema  # noqa: E402

from conftest import TINY, train_engine  # noqa: E402
from support.cli import fault_keeps_iterations, rlbench  # noqa: E402


@pytest.mark.parametrize("schedule", ["sync", "periodic_async"])
@pytest.mark.e2e
def test_ray_trains_bitwise_like_local_processes(schedule, trained):
    local = trained([f"engine.schedule={schedule}"])  # test_placement.py's runs, where both files run
    remote = train_engine([f"engine.schedule={schedule}", "engine.launcher=ray"])
    assert not ray.is_initialized()  # the run's own Ray instance is gone with the schedule
    assert remote["samples"] == local["samples"] and remote["rewards"] == local["rewards"]
    for n, p in local["params"].items():
        assert torch.equal(p, remote["params"][n]), n
    workers = {e.worker for e in remote["events"]}
    assert workers == {e.worker for e in local["events"]}
    expected = {"colocated0", "colocated1"} if schedule == "sync" else {"trainer0", "rollout0", "driver"}
    assert expected <= workers


@pytest.mark.e2e
def test_ray_run_writes_the_local_schema(tmp_path):
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   "--no-report", "--set", "engine.schedule=periodic_async", "--set", "engine.launcher=ray",
                   timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    res = schema.load_cell(run_dir / "periodic_async")
    assert res["status"] == "complete" and [it["iteration"] for it in res["iterations"]] == [0, 1, 2]
    assert [p["worker"] for p in res["placement"]] == ["rollout0", "trainer0", "driver"]
    events = schema.load_events(run_dir / "periodic_async")
    assert {"trainer0", "rollout0"} <= {e["worker"] for e in events}
    assert all(0 <= e["start"] <= e["end"] <= res["wall_s_total"] for e in events)


@pytest.mark.e2e
def test_dead_ray_rollout_actor_keeps_measured_iterations(tmp_path):
    fault_keeps_iterations(tmp_path, "rollout_exit:2", ["engine.schedule=periodic_async", "engine.launcher=ray"],
                           "periodic_async", "rollout0 died", "_RayWorker")
