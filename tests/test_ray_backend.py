"""engine.backend=ray: rollout workers as Ray actors on a local 2-CPU Ray cluster.

The same PeriodicAsyncSchedule drives RayRolloutPool unchanged: it must train exactly like the sync
loop (dispatch order, bitwise), return stage events shaped like the process pool's, and turn a dead
actor into a WorkerError within a bounded time, leaving no actor process behind.
"""
import os
import time
from dataclasses import asdict

import pytest

ray = pytest.importorskip("ray", reason="engine.backend=ray needs Ray: pip install 'rlbench[ray]'")

import torch  # noqa: E402

from rlbench.config import load_config  # noqa: E402
from rlbench.errors import WorkerError  # noqa: E402
from rlbench.stages import StageEvent, now  # noqa: E402

from conftest import TINY  # noqa: E402

RAY_CPUS = 2  # the local cluster of every test here, whatever the machine has
# cpu-tiny's 30 warm-start steps leave every reward 0, so no gradient and nothing to compare; 60 steps
# on one-step problems give mixed rewards in a few seconds (the warm start is cached for the session).
LEARNS = ["model.warmstart_steps=60", "data.max_steps=1"]


def _setup(overrides: list[str]):
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.model.loader import load_policy

    cfg = load_config(TINY, LEARNS + overrides + ["run.iterations=4"])
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, _ = load_policy(cfg, dataset)
    return cfg, dataset, policy, tok


def _async_schedule(cfg, policy, tok, pool_kind: str, actors: int | None = None):
    """What make_engine builds for periodic_async, with the pool chosen here (the factory hook is separate)."""
    from rlbench import device as dev
    from rlbench.engines.schedules.periodic_async import PeriodicAsyncSchedule
    from rlbench.engines.trainer.trainer import Trainer
    from rlbench.stages import Recorder

    e, t0, device = cfg.engine, now(), dev.resolve("cpu")
    dev.set_threads(e.train_devices)
    trainer = Trainer(policy, cfg, tok)
    if pool_kind == "ray":
        from rlbench.engines.rollout.ray_pool import RayRolloutPool

        pool = RayRolloutPool(policy, tok.eos_token_id, cfg.rollout.max_num_seqs, e.rollout_devices, "cpu", t0,
                              start_timeout_s=120, actors=actors, num_cpus=RAY_CPUS)
    else:
        from rlbench.engines.rollout.pool import ProcessRolloutPool

        pool = ProcessRolloutPool(policy, tok.eos_token_id, cfg.rollout.max_num_seqs, e.rollout_devices, "cpu", t0,
                                  start_timeout_s=120)
    rec = Recorder("trainer", t0, device=device, devices=e.train_devices)
    return PeriodicAsyncSchedule(trainer, pool, rec, "dispatch", timeout_s=60), t0


def _train(schedule, cfg, dataset, tok, iterations: int = 3) -> dict:
    """-> final params, samples, and per iteration the pool's events and rollout stats."""
    from rlbench.engines.factory import iteration_input

    samples, events, stats = [], [], []
    for k in range(iterations):
        out = schedule.run_iteration(iteration_input(cfg, dataset, tok, k))
        for g in sorted(out.groups, key=lambda g: g.prompt_index):
            samples.append((k, g.prompt_index, [tuple(r) for r in g.responses]))
            assert g.version == out.trained_version == k  # staleness 0
        events.append(list(getattr(schedule, "worker_events", [])))
        stats.append(out.rollout_stats)
    params = {n: p.detach().clone() for n, p in schedule.trainer.policy.named_parameters()}
    return {"params": params, "samples": samples, "events": events, "stats": stats}


def run(backend: str, overrides: list[str] = (), actors: int | None = None) -> dict:
    from rlbench import device as dev
    from rlbench.engines.factory import make_engine

    cfg, dataset, policy, tok = _setup(list(overrides) + [
        f"engine.schedule={'sync' if backend == 'sync' else 'periodic_async'}"])
    init = {n: p.detach().clone() for n, p in policy.named_parameters()}
    if backend == "sync":
        schedule, _ = make_engine(cfg, policy, tok, now(), sink=None, device=dev.resolve("cpu"))
    else:
        schedule, _ = _async_schedule(cfg, policy, tok, backend, actors)
    started = time.monotonic()
    try:
        out = _train(schedule, cfg, dataset, tok)
    finally:
        schedule.close()
    out["wall_s"], out["init"] = time.monotonic() - started, init
    return out


@pytest.fixture(scope="module")
def sync_run():
    return run("sync")


@pytest.fixture(scope="module")
def ray_run():
    return run("ray")


def test_ray_periodic_async_equals_sync_bitwise(sync_run, ray_run):
    assert ray_run["samples"] == sync_run["samples"]  # same samples from the same weights
    assert any(not torch.equal(sync_run["init"][n], p) for n, p in sync_run["params"].items())  # it trained
    assert not ray.is_initialized()  # the pool started its own cluster and shut it down on close
    for n, p in sync_run["params"].items():
        assert torch.equal(p, ray_run["params"][n]), n


def test_ray_two_actors_shard_and_still_equal_sync(sync_run):
    """Two 1-CPU actors split the prompts; sampling is seeded per (iteration, prompt, sample), so nothing changes."""
    two = run("ray", ["engine.rollout_devices=2"], actors=2)
    assert two["samples"] == sync_run["samples"]
    for n, p in sync_run["params"].items():
        assert torch.equal(p, two["params"][n]), n
    assert {e.worker for e in two["events"][0]} == {"rollout0", "rollout1"}
    assert all(len(s) == 2 for s in two["stats"])


def test_ray_events_shaped_like_process_pool(ray_run):
    proc = run("process")
    for r_events, p_events in zip(ray_run["events"], proc["events"]):
        assert r_events and all(isinstance(e, StageEvent) for e in r_events)
        assert {tuple(asdict(e)) for e in r_events} == {tuple(asdict(e)) for e in p_events}  # same fields
        shape = lambda evs: sorted((e.worker, e.stage, e.iteration, e.devices) for e in evs)  # noqa: E731
        assert shape(r_events) == shape(p_events)
        assert {"rollout"} <= {e.stage for e in r_events} <= {"rollout", "weight_sync"}
        for e in r_events:  # on the driver's clock: relative to t0, ordered, within the run
            assert 0 <= e.start <= e.end < 600
    assert [s[0].keys() for s in ray_run["stats"]] == [s[0].keys() for s in proc["stats"]]
    # Every iteration's weight load is timed on the actor, as in the process pool.
    assert all([e.stage for e in evs].count("weight_sync") == 1 for evs in ray_run["events"])


def test_actor_failures_are_worker_errors(monkeypatch):
    """An exception inside an actor (weights lacking every parameter) and a dead actor (RLBENCH_FAULT=
    rollout_exit:1 makes it os._exit at iteration 1) both end in a WorkerError naming the actor, fast."""
    from rlbench.engines.factory import iteration_input

    cfg, dataset, policy, tok = _setup(["engine.schedule=periodic_async"])
    monkeypatch.setenv("RLBENCH_FAULT", "rollout_exit:1")  # forwarded to the actors by the pool
    schedule, _ = _async_schedule(cfg, policy, tok, "ray")
    pids = dict(schedule.pool.pids)
    try:
        inp = iteration_input(cfg, dataset, tok, 0)
        schedule.pool.publish({}, 7, 0)
        with pytest.raises(WorkerError, match="rollout worker rollout0 failed while loading weights version 7"):
            schedule.pool.produce(0, inp.requests, inp.sampling, _Raising(), 60)
        schedule.run_iteration(inp)  # the actor survived its exception
        started = time.monotonic()
        with pytest.raises(WorkerError, match="rollout worker rollout0 died while generating iteration 1"):
            schedule.run_iteration(iteration_input(cfg, dataset, tok, 1))
        assert time.monotonic() - started < 30  # the queue timeout is 60 s: detected, not timed out
    finally:
        schedule.close()
    assert not ray.is_initialized()
    for pid in pids.values():
        assert not _alive(pid)


class _Raising:
    """Stands in for the schedule's queue: raises what the producer hands over."""

    def put(self, item):
        if isinstance(item, BaseException):
            raise item


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie awaiting its reaper is dead too
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_data_parallel_trainer_matches_one_trainer():
    """Two gloo ranks on the same groups: the update equals one trainer's (up to summation order), the
    replicas stay bitwise identical, and a dead rank is a WorkerError, not a hang in a collective."""
    import copy

    from rlbench import device as dev
    from rlbench.engines.factory import iteration_input
    from rlbench.engines.rollout.sampler import BuiltinSampler
    from rlbench.engines.trainer.phases import train_phases
    from rlbench.engines.trainer.distributed import DataParallelTrainer
    from rlbench.engines.trainer.trainer import Trainer
    from rlbench.stages import Recorder

    cfg, dataset, policy, tok = _setup(["engine.train_devices=2"])
    init = {n: p.detach().clone() for n, p in policy.named_parameters()}
    single, rec = Trainer(copy.deepcopy(policy), cfg, tok), Recorder("trainer", now())
    sampler = BuiltinSampler(copy.deepcopy(policy).eval(), tok.eos_token_id, cfg.rollout.max_num_seqs,
                             device=dev.resolve("cpu"))
    dp = DataParallelTrainer(policy, cfg, tok, ranks=2, device_kind="cpu", t0=now(), num_cpus=RAY_CPUS,
                             start_timeout_s=60)
    dp_rec = Recorder("driver", now())
    try:
        for k in range(2):
            inp = iteration_input(cfg, dataset, tok, k)
            sampler.load_weights(single.weights(), single.version)
            groups = sorted(sampler.generate(inp.requests, inp.sampling), key=lambda g: g.prompt_index)
            single.begin()
            rewards = train_phases(single, rec, k, groups, inp.answers)
            stats = single.step()
            dp.begin()
            dp.train(dp_rec, k, groups, inp.answers)
            dp_stats, dp_rewards = dp.finish(dp_rec, k)
            events = dp_rec.drain()
            assert dp_rewards == rewards
            assert dp_stats["tokens"] == stats["tokens"]
            assert dp_stats["loss"] == pytest.approx(stats["loss"], rel=1e-5, abs=1e-7)
            assert {e.worker for e in events} == {"trainer0", "trainer1"}
            assert {"update", "optimizer_step"} <= {e.stage for e in events}
            assert dp.version == single.version == k + 1
        w0, w1 = dp.replica_weights()
        assert all(torch.equal(w0[n], w1[n]) for n in w0)
        assert any(not torch.equal(init[n], w0[n]) for n in w0)  # it trained
        for n, p in single.policy.named_parameters():
            torch.testing.assert_close(w0[n], p.detach(), rtol=1e-5, atol=1e-6)
        ray.kill(dp.ranks[1], no_restart=True)
        started = time.monotonic()
        with pytest.raises(WorkerError, match="a trainer rank died"):
            dp.begin()
            dp.train(dp_rec, 2, groups, inp.answers)
            dp.finish(dp_rec, 2)
        assert time.monotonic() - started < 30
    finally:
        dp.close()
    assert not ray.is_initialized()
