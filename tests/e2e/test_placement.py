"""The fair layout (docs/architecture/placement.md): sync as data-parallel colocated ranks, pinned workers on
physical devices.

Equivalences: data-parallel sync == single-process sync (close: the all-reduce sums per-rank gradients);
periodic-async with as many trainer ranks as sync has ranks == data-parallel sync bitwise (the j-th group
trained goes to rank j mod N, sync's rank r trains prompts r, r+N, ...: the same sums). Plus the device
check, TPSPD's divisor, the placement record and the overlap a real run shows (none in the barrier cell).
"""
import pytest
import torch

from rlbench.core.config_files import load_config
from rlbench.core.devices.placement import plan
from rlbench.core.errors import UserError
from rlbench.core.results import schema

from conftest import TINY, train_engine
from support.cli import rlbench

pytestmark = pytest.mark.usefixtures("one_thread")  # the in-process engine (the workers have 1 thread each)


@pytest.fixture(scope="module")
def single_process():
    return train_engine(["engine.schedule=sync"], placed=False)


@pytest.fixture(scope="module")
def dp_sync(trained):
    return trained(["engine.schedule=sync"])  # 1 + 1 devices: two colocated ranks


@pytest.mark.e2e
def test_data_parallel_sync_equals_single_process(single_process, dp_sync):
    assert dp_sync["samples"] == single_process["samples"]  # per-sample seeds: any shard, same samples
    assert dp_sync["rewards"] == single_process["rewards"]
    assert any(not torch.equal(dp_sync["init"][n], p) for n, p in dp_sync["params"].items())  # it trained
    for n, p in single_process["params"].items():
        torch.testing.assert_close(dp_sync["params"][n], p, rtol=1e-4, atol=1e-6)
    ranks = {e.worker for e in dp_sync["events"]}
    assert {"colocated0", "colocated1"} <= ranks
    for w in ("colocated0", "colocated1"):  # each rank generates and trains its own shard
        assert {"weight_sync", "rollout", "update", "optimizer_step"} <= {e.stage for e in dp_sync["events"]
                                                                         if e.worker == w}


@pytest.mark.e2e
def test_periodic_async_equals_data_parallel_sync_bitwise():
    """Pools sharing 2 devices: 2 rollout workers and 2 trainer ranks vs 2 colocated ranks."""
    shared = ["engine.share_devices=true", "engine.rollout_devices=2", "engine.train_devices=2"]
    sync = train_engine(shared + ["engine.schedule=sync"])
    asyn = train_engine(shared + ["engine.schedule=periodic_async"])
    assert asyn["samples"] == sync["samples"]
    for n, p in sync["params"].items():
        assert torch.equal(p, asyn["params"][n]), n
    assert {"rollout0", "rollout1", "trainer0", "trainer1"} <= {e.worker for e in asyn["events"]}


@pytest.mark.e2e
def test_periodic_async_close_to_data_parallel_sync(dp_sync, trained):
    asyn = trained(["engine.schedule=periodic_async"])  # 1 trainer rank vs 2 colocated ranks
    assert asyn["samples"] == dp_sync["samples"]
    for n, p in dp_sync["params"].items():
        torch.testing.assert_close(asyn["params"][n], p, rtol=1e-4, atol=1e-6)


def test_plan_pins_each_worker_to_its_own_device():
    sync = plan(load_config(TINY, ["engine.rollout_devices=1", "engine.train_devices=1"]).engine, "cpu", 2)
    assert [s.record() for s in sync.slots] == [
        {"worker": "colocated0", "role": "colocated", "device": "cpu:0", "threads": 1},
        {"worker": "colocated1", "role": "colocated", "device": "cpu:1", "threads": 1}]
    asyn = plan(load_config(TINY, ["engine.schedule=periodic_async", "engine.rollout_devices=2"]).engine, "cpu", 4)
    assert [(s.worker, s.device) for s in asyn.slots] == [("rollout0", "cpu:0"), ("rollout1", "cpu:1"),
                                                          ("trainer0", "cpu:2")]
    assert asyn.devices == 3
    shared = plan(load_config(TINY, ["engine.schedule=periodic_async", "engine.share_devices=true"]).engine,
                  "cuda", 1)
    assert [(s.worker, s.device) for s in shared.slots] == [("rollout0", "cuda:0"), ("trainer0", "cuda:0")]
    assert shared.devices == 1  # TPSPD divides by the one physical GPU


def test_oversubscribed_devices_are_refused():
    eng = load_config(TINY, ["engine.rollout_devices=64", "engine.train_devices=64"]).engine
    with pytest.raises(UserError) as e:
        plan(eng, "cpu", 2)
    msg = str(e.value)
    assert "engine.rollout_devices=64" in msg and "engine.train_devices=64" in msg and "has 2 cores" in msg


def test_oversubscription_exits_2_through_cli(tmp_path):
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--no-progress",
                   "--set", "engine.rollout_devices=64", "--set", "engine.train_devices=64")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "ask for 128 devices" in proc.stderr and "engine.share_devices" in proc.stderr


@pytest.fixture(scope="module")
def async_ablation(async_ladder_run):
    """--ablation async on a workload with a rollout long enough to overlap: sync, barrier, periodic-async
    (conftest.py's shared run)."""
    return async_ladder_run


def _overlapping_iterations(events: list[dict]) -> list[int]:
    """Iterations in which the trainer's first update starts before the last rollout ends."""
    out = []
    for k in sorted({e["iteration"] for e in events}):
        upd = [e["start"] for e in events if e["iteration"] == k and e["stage"] == "update"
               and e["worker"].startswith("trainer")]
        roll = [e["end"] for e in events if e["iteration"] == k and e["stage"] == "rollout"]
        if upd and roll and min(upd) < max(roll):
            out.append(k)
    return out


@pytest.mark.e2e
def test_async_overlaps_and_barrier_does_not(async_ablation):
    run_dir, proc = async_ablation
    assert _overlapping_iterations(schema.load_events(run_dir / "periodic_async"))
    assert _overlapping_iterations(schema.load_events(run_dir / "periodic_async_barrier")) == []
    said = " ".join(proc.stdout.split())  # the verdict wraps at 100 columns wherever its numbers put the breaks
    assert "the device split " in said and "overlap " in said  # the verdict's attribution


@pytest.mark.e2e
def test_tpspd_divides_by_physical_devices_and_placement_is_recorded(async_ablation):
    run_dir, _ = async_ablation
    sync = schema.load_cell(run_dir / "sync")
    assert sync["devices"] == 2
    assert [(p["worker"], p["role"], p["device"], p["threads"]) for p in sync["placement"]] == [
        ("colocated0", "colocated", "cpu:0", 1), ("colocated1", "colocated", "cpu:1", 1),
        ("driver", "driver", None, 1)]
    asyn = schema.load_cell(run_dir / "periodic_async")
    assert [(p["worker"], p["role"], p["device"]) for p in asyn["placement"]] == [
        ("rollout0", "rollout", "cpu:0"), ("trainer0", "trainer", "cpu:1"), ("driver", "driver", None)]
    for res in (sync, asyn):
        for it in res["iterations"]:
            assert it["devices"] == 2
            assert it["tpspd"] == pytest.approx(it["tokens"] / (it["wall_s"] * 2))


@pytest.mark.e2e
def test_shared_devices_divide_by_the_devices_occupied(tmp_path):
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   "--no-report", "--set", "engine.schedule=periodic_async", "--set", "engine.share_devices=true",
                   "--set", "run.iterations=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    res = schema.load_cell(run_dir / "periodic_async")
    assert res["devices"] == 1 and all(it["devices"] == 1 for it in res["iterations"])
    assert {p["device"] for p in res["placement"] if p["device"]} == {"cpu:0"}
