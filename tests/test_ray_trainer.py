"""engine.backend=ray end to end: make_engine puts the trainer ranks (and the async rollout workers) on
Ray actors, and every schedule drives them unchanged.

One rank trains bitwise like the local trainer; two ranks deal the groups the same way under sync and
periodic-async (bitwise equal to each other) and match one trainer up to the all-reduce's summation
order. A `rlbench run` on Ray writes the same result files as a local one.
"""
import dataclasses

import pytest

ray = pytest.importorskip("ray", reason="engine.backend=ray needs Ray: pip install 'rlbench[ray]'")

import torch  # noqa: E402

from rlbench import schema  # noqa: E402
from rlbench.config import RunConfig, load_config  # noqa: E402
from rlbench.runner import CellRun  # noqa: E402
from rlbench.stages import now  # noqa: E402

from conftest import TINY  # noqa: E402
from test_cli_run import fault_keeps_iterations, rlbench  # noqa: E402
from test_ray_backend import LEARNS  # noqa: E402


def train(overrides: list[str], iterations: int = 3) -> dict:
    """make_engine as the runner builds it; -> final params, samples, rewards and stage events."""
    from rlbench import device as dev
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import iteration_input, make_engine
    from rlbench.engines.model.loader import load_policy

    cfg = load_config(TINY, LEARNS + ["engine.consume_order=dispatch", "engine.queue_timeout_s=120"]
                      + overrides)
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, _ = load_policy(cfg, dataset)
    events = []
    schedule, _ = make_engine(cfg, policy, tok, now(), events.append, dev.resolve("cpu"), dataset=dataset)
    samples, rewards = [], []
    try:
        for k in range(iterations):
            out = schedule.run_iteration(iteration_input(cfg, dataset, tok, k))
            events += getattr(schedule, "worker_events", [])
            samples += [(k, g.prompt_index, [tuple(r) for r in g.responses])
                        for g in sorted(out.groups, key=lambda g: g.prompt_index)]
            rewards.append(dict(sorted(out.rewards.items())))
            assert out.trained_version == k
        params = {n: p.detach().clone() for n, p in schedule.trainer.policy.named_parameters()}
    finally:
        schedule.close()
    assert not ray.is_initialized()  # the run's own Ray instance is gone with the schedule
    return {"params": params, "samples": samples, "rewards": rewards, "events": events}


@pytest.fixture(scope="module")
def local_sync():
    return train(["engine.schedule=sync"])


def test_one_ray_rank_trains_bitwise_like_the_local_trainer(local_sync):
    remote = train(["engine.schedule=periodic_async", "engine.backend=ray"])
    assert remote["samples"] == local_sync["samples"]
    assert remote["rewards"] == local_sync["rewards"]
    for n, p in local_sync["params"].items():
        assert torch.equal(p, remote["params"][n]), n
    workers = {e.worker for e in remote["events"]}
    assert workers == {"driver", "trainer0", "rollout0"}
    by_worker = lambda w: {e.stage for e in remote["events"] if e.worker == w}  # noqa: E731
    assert {"reward", "old_logprob", "ref_logprob", "update", "optimizer_step"} <= by_worker("trainer0")
    assert {"weight_sync", "queue_wait"} <= by_worker("driver")


def test_two_ranks_same_under_sync_and_async_and_close_to_one_trainer(local_sync):
    sync2 = train(["engine.schedule=sync", "engine.backend=ray", "engine.train_ranks=2"])
    async2 = train(["engine.schedule=periodic_async", "engine.backend=ray", "engine.train_ranks=2",
                    "engine.train_devices=2"])
    assert sync2["samples"] == async2["samples"]
    for n, p in sync2["params"].items():
        assert torch.equal(p, async2["params"][n]), n  # the j-th group goes to rank j % 2 in both
    for n, p in local_sync["params"].items():
        torch.testing.assert_close(sync2["params"][n], p, rtol=1e-4, atol=1e-5)
    for run in (sync2, async2):
        ranks = {e.worker for e in run["events"] if e.worker.startswith("trainer")}
        assert ranks == {"trainer0", "trainer1"}
        assert all(e.devices == 1 for e in run["events"] if e.worker in ranks)  # 2 devices, 2 ranks


def test_ray_run_writes_the_local_schema(tmp_path):
    """`rlbench run` on Ray (2 trainer ranks): same files and keys as a local run, every event on the run clock."""
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   "--no-report", "--set", "engine.schedule=periodic_async", "--set", "engine.backend=ray",
                   "--set", "engine.train_ranks=2", "--set", "engine.train_devices=2", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    res = schema.load_cell(run_dir / "periodic_async")
    assert res["status"] == "complete" and res["config"]["engine"]["train_ranks"] == 2
    assert [it["iteration"] for it in res["iterations"]] == [0, 1, 2]
    assert all(it["devices"] == 3 for it in res["iterations"])  # 1 rollout + 2 training devices
    assert set(res["iterations"][0]["idle_frac"]) >= {"trainer0", "trainer1", "rollout0"}
    fields = {f.name for f in dataclasses.fields(schema.IterationRecord)}
    assert all(set(it) == fields for it in res["iterations"])
    local = CellRun(RunConfig.model_validate(res["config"]), tmp_path / "local", "local").results()
    assert set(res) - {"_dir"} == set(local)  # the results.json keys a local cell writes
    events = schema.load_events(run_dir / "periodic_async")
    assert {"driver", "trainer0", "trainer1", "rollout0"} == {e["worker"] for e in events}
    assert all(0 <= e["start"] <= e["end"] <= res["wall_s_total"] for e in events)


def test_dead_trainer_rank_keeps_measured_iterations(tmp_path):
    """Every rank os._exit()s at iteration 2: the rank is named, iterations 0-1 kept, no actor left."""
    fault_keeps_iterations(tmp_path, "trainer_exit:2", ["engine.backend=ray", "engine.train_ranks=2"], "sync",
                           "a trainer rank died while training iteration 2", "TrainerRank")
