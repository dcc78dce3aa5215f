"""Worker processes start on their own accelerator, the driver holds none, and what every worker observed
is checked against the plan (engines/launch.py, engines/hosts.py; issue 26).

No GPU here: the process starts are recorded through a stand-in multiprocessing context (the environment
each worker process is created with and the arguments it gets), and the driver runs a whole cell with
engine.device=cuda against in-process stand-in workers on the CPU, where any CUDA call of the driver
fails (this torch has no CUDA) and is counted.
"""
import dataclasses
import json
import os
import queue
import sys

import pytest

import conftest
from support.cli import rlbench
from rlbench.core.errors import WorkerError

ROOT = str(conftest.ROOT)
VARS = ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")


def _plan(kind: str, schedule: str, rollout: int, train: int, share: bool = False, available: int = 8):
    from rlbench.core.config import RunConfig
    from rlbench.core.config_files import with_overrides
    from rlbench.core.devices.placement import plan

    engine = with_overrides(RunConfig(), {"engine": {"schedule": schedule, "rollout_devices": rollout,
                                                      "train_devices": train, "share_devices": share}}).engine
    return plan(engine, kind, available=available)


class _Process:
    """Stands in for a worker process: records the environment it works in (the one it is created with,
    which a spawned process keeps, with what it is handed laid over it, as `_serve` does first: a forked one
    has its server's) and its arguments, and reports Ready with what a real one would observe."""

    started: list = []

    def __init__(self, target, name, args):
        self.target, self.name, self.args = target, name, args
        self.exitcode = 0

    def start(self):
        slot, cls, args, inbox, out, handed = self.args
        env = {k: handed.get(k, os.environ.get(k)) for k in VARS}
        _Process.started.append({"worker": slot.worker, "env": env, "slot": slot, "target": self.target.__name__})
        from rlbench.engines.host_messages import Ready

        var = "CUDA_VISIBLE_DEVICES" if slot.kind == "cuda" else "ASCEND_RT_VISIBLE_DEVICES"
        out.put(Ready(slot.worker, 1000 + len(_Process.started), {"threads": 1, "visible": env[var]}))

    def is_alive(self):
        return False

    def join(self, timeout=None):
        pass


class _Context:
    Queue = queue.Queue
    Process = _Process


def _start(monkeypatch, placement, parent_env: dict | None = None) -> dict:
    """Start a ProcessHost on every slot of `placement` with recorded process starts;
    -> worker -> {env, child slot}; the host's observations checked against the plan."""
    from rlbench.engines import hosts, launch
    from rlbench.engines.watchdog import Watchdog

    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    for k, v in (parent_env or {}).items():
        monkeypatch.setenv(k, v)
    methods = []  # forked unless it holds an NPU: either way it must work with only its device visible
    monkeypatch.setattr(hosts, "_context", lambda forkable: methods.append(forkable) or _Context)
    _Process.started = []
    before = {k: os.environ.get(k) for k in VARS}
    host = hosts.ProcessHost(placement.slots, object, lambda s: (), 5.0, Watchdog())
    assert methods == [all(slot.kind != "npu" for slot in placement.slots)]
    try:
        launch.check(placement, host.observed)
    finally:
        host.close()
    assert {k: os.environ.get(k) for k in VARS} == before  # the driver's own environment is untouched
    return {p["worker"]: p for p in _Process.started}


def start_table(monkeypatch, kind="cuda", parent_env=None) -> dict:
    """worker -> the visible devices its process is started with, for 1, 2 and 4 GPUs (the table of
    docs/architecture/placement.md)."""
    var = "CUDA_VISIBLE_DEVICES" if kind == "cuda" else "ASCEND_RT_VISIBLE_DEVICES"
    layouts = {"1": [("sync", 1, 1, True), ("periodic_async", 1, 1, True)],
               "2": [("sync", 1, 1, False), ("periodic_async", 1, 1, False)],
               "4": [("sync", 2, 2, False), ("periodic_async", 2, 2, False), ("periodic_async", 1, 3, False)]}
    out = {}
    for gpus, rows in layouts.items():
        for schedule, r, t, share in rows:
            started = _start(monkeypatch, _plan(kind, schedule, r, t, share, available=int(gpus)), parent_env)
            out[(gpus, f"{schedule} {r}+{t}")] = {w: p["env"][var] for w, p in started.items()}
    return out


def test_worker_processes_start_with_only_their_gpu_visible_1_2_4_gpus(monkeypatch):
    t = start_table(monkeypatch)
    assert t[("1", "sync 1+1")] == {"colocated0": "0"}
    assert t[("1", "periodic_async 1+1")] == {"rollout0": "0", "trainer0": "0"}  # share_devices: one GPU
    assert t[("2", "sync 1+1")] == {"colocated0": "0", "colocated1": "1"}
    assert t[("2", "periodic_async 1+1")] == {"rollout0": "0", "trainer0": "1"}
    assert t[("4", "sync 2+2")] == {f"colocated{i}": str(i) for i in range(4)}
    assert t[("4", "periodic_async 2+2")] == {"rollout0": "0", "rollout1": "1", "trainer0": "2", "trainer1": "3"}
    assert t[("4", "periodic_async 1+3")] == {"rollout0": "0", "trainer0": "1", "trainer1": "2", "trainer2": "3"}


def test_each_worker_gets_device_index_0_of_the_one_it_sees(monkeypatch):
    """Inside the process the only visible device is index 0: the slot it is built with says cuda:0,
    whatever its planned index; the plan's index stays in results.json."""
    started = _start(monkeypatch, _plan("cuda", "periodic_async", 2, 2, available=4))
    assert {w: (p["slot"].kind, p["slot"].index, p["slot"].threads, p["target"]) for w, p in started.items()} == {
        w: ("cuda", 0, 1, "_serve") for w in ("rollout0", "rollout1", "trainer0", "trainer1")}


def test_an_inherited_visible_list_is_mapped_and_npu_uses_its_own_variable(monkeypatch):
    t = start_table(monkeypatch, parent_env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert t[("4", "periodic_async 2+2")] == {"rollout0": "4", "rollout1": "5", "trainer0": "6", "trainer1": "7"}
    assert t[("2", "sync 1+1")] == {"colocated0": "4", "colocated1": "5"}
    npu = start_table(monkeypatch, kind="npu")
    assert npu[("4", "sync 2+2")] == {f"colocated{i}": str(i) for i in range(4)}
    started = _start(monkeypatch, _plan("npu", "sync", 1, 1, available=2))
    assert all(p["env"]["CUDA_VISIBLE_DEVICES"] is None for p in started.values())  # only NPU's variable


def test_ray_actors_ask_for_whole_devices_or_a_share_of_one():
    from rlbench.engines import launch

    two = _plan("cuda", "periodic_async", 1, 1, available=2).slots
    shared = _plan("cuda", "periodic_async", 1, 1, share=True, available=1).slots
    assert [launch.ray_options(s, launch.sharing(two)[s.worker]) for s in two] == [
        {"num_cpus": 1, "num_gpus": 1.0}] * 2
    assert [launch.ray_options(s, launch.sharing(shared)[s.worker]) for s in shared] == [
        {"num_cpus": 1, "num_gpus": 0.5}] * 2  # both fit on the one GPU
    cpu = _plan("cpu", "sync", 1, 1, available=2).slots
    assert [launch.ray_options(s, 1) for s in cpu] == [{"num_cpus": 1}] * 2


def test_a_mismatch_names_the_worker_the_plan_and_the_observation(monkeypatch):
    from rlbench.engines import launch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    p = _plan("cuda", "periodic_async", 1, 1, available=2)
    good = {"rollout0": {"threads": 1, "visible": "0"}, "trainer0": {"threads": 1, "visible": "1"}}
    launch.check(p, good)
    with pytest.raises(WorkerError, match=r"trainer0 \(planned cuda:1.*visible: planned '1', observed '0'"):
        launch.check(p, {**good, "trainer0": {"threads": 1, "visible": "0"}})
    with pytest.raises(WorkerError, match=r"rollout0.*threads: planned 1, observed 4"):
        launch.check(p, {**good, "rollout0": {"threads": 4, "visible": "0"}})
    with pytest.raises(WorkerError, match="trainer0.*nothing observed"):
        launch.check(p, {"rollout0": good["rollout0"]})
    # Ray picks the device: one visible each, shared exactly as planned
    ray_good = {"rollout0": {"threads": 1, "visible": "3", "node": "a"}, "trainer0": {"threads": 1, "visible": "5", "node": "a"}}
    launch.check(p, ray_good, exact_device=False)
    with pytest.raises(WorkerError, match="planned on different devices observed the same one"):
        launch.check(p, {**ray_good, "trainer0": {**ray_good["trainer0"], "visible": "3"}}, exact_device=False)
    with pytest.raises(WorkerError, match="visible: planned 'one device', observed '3,5'"):
        launch.check(p, {**ray_good, "trainer0": {**ray_good["trainer0"], "visible": "3,5"}}, exact_device=False)
    shared = _plan("cuda", "periodic_async", 1, 1, share=True, available=1)
    with pytest.raises(WorkerError, match="planned on cuda:0 with other workers"):
        launch.check(shared, ray_good, exact_device=False)


@pytest.mark.e2e
def test_a_forked_worker_works_in_the_environment_it_is_handed(monkeypatch):
    """A worker forked from the cell's fork server has the server's environment, not the one the cell has
    when it starts the worker: `_serve` lays what it is handed (its one visible GPU, on a GPU) over it
    before anything runs. Real processes on CPU, with the variable a GPU worker is handed."""
    from rlbench.core.devices import starting
    from rlbench.engines import hosts, launch
    from rlbench.engines.watchdog import Watchdog
    from support.start_probe import EnvReporter

    monkeypatch.delenv(starting.ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    starting.warm(forkable=True)  # the server starts now, without the variable
    assert starting.server_pid() is not None
    monkeypatch.setattr(launch, "start_env", lambda slot, environ=None: {"CUDA_VISIBLE_DEVICES": "3"})
    slot = _plan("cpu", "sync", 1, 1, available=2).slots[0]
    host = hosts.ProcessHost([slot], EnvReporter, lambda s: (), 120.0, Watchdog())
    try:
        got = host.wait([host.submit(slot.worker, "env", "CUDA_VISIBLE_DEVICES")], doing="asking")
    finally:
        host.close()
    assert got == ["3"] and "CUDA_VISIBLE_DEVICES" not in os.environ


@pytest.mark.e2e
def test_cpu_workers_observe_their_own_core_and_the_result_records_it(tmp_path):
    """A real run on 2 cores: every worker reports its one core (different ones) and 1 thread, next to the
    plan in results.json; the driver says it initialised no accelerator."""
    from rlbench.core.config_files import load_config
    from rlbench.run.cell import run_cell

    cfg = load_config(os.path.join(ROOT, "configs", "cpu-tiny.yaml"),
                      ["engine.schedule=periodic_async", "run.iterations=2", "run.warmup_iterations=1"])
    res = run_cell(cfg, tmp_path / "cell", "periodic_async", progress=False)
    rec = {r["worker"]: r for r in res["placement"]}
    assert rec["rollout0"]["observed"]["threads"] == rec["trainer0"]["observed"]["threads"] == 1
    cores = [rec[w]["observed"]["affinity"] for w in ("rollout0", "trainer0")]
    assert all(len(c) == 1 for c in cores) and cores[0] != cores[1]
    assert rec["driver"]["observed"]["cuda_initialized"] is False
    assert rec["rollout0"]["observed"]["pid"] != os.getpid()


@pytest.mark.e2e
@pytest.mark.parametrize("failing", ["every", "final"])
def test_a_turn_ring_failing_at_the_end_loses_no_iteration(tmp_path, failing):
    """The ring raising as the cell leaves it (once a wake-up's broken pipe did, after the last iteration):
    the cell fails, and its results.json still holds every iteration, with the status and the error. "final":
    only the last leave (the one after the cell's own work succeeded) raises, which once left "complete"."""
    from rlbench.core.config_files import load_config
    from rlbench.core.results import schema
    from rlbench.run.cell import run_cell
    from rlbench.run.interleave import Pacer

    class BrokenRing(Pacer):
        def leave(self, wait_for_others=False):
            if failing == "every" or not wait_for_others:
                raise BrokenPipeError(32, "Broken pipe")

    cfg = load_config(os.path.join(ROOT, "configs", "cpu-tiny.yaml"), ["run.iterations=2", "run.warmup_iterations=1"])
    with pytest.raises(BrokenPipeError):
        run_cell(cfg, tmp_path / "cell", "sync", progress=False, pacer=BrokenRing())
    res = schema.load_cell(tmp_path / "cell")
    assert res["status"] == "failed" and "BrokenPipeError" in res["error"]
    assert len(res["iterations"]) == 2


@pytest.mark.e2e
def test_a_worker_given_other_than_its_plan_fails_the_run_with_exit_3(tmp_path):
    out = tmp_path / "runs"
    p = rlbench("run", "--config", os.path.join(ROOT, "configs", "cpu-tiny.yaml"), "--ablation", "none",
                "--set", "engine.schedule=periodic_async", "--out", out, env={"RLBENCH_FAULT": "misplace:trainer0"})
    assert p.returncode == 3, p.stderr[-2000:]
    assert "placement mismatch" in p.stderr and "trainer0 (planned cpu:1, 1 thread(s)): threads: planned 1, observed 2" in p.stderr
    results = [json.loads(f.read_text()) for f in out.rglob("results.json")]
    assert results and results[0]["status"] == "failed" and not results[0]["iterations"]
    seen = {r["worker"]: r["observed"] for r in results[0]["placement"]}
    assert seen["trainer0"]["threads"] == 2 and seen["rollout0"]["threads"] == 1


# ---------------------------------------------------------------- the driver holds no accelerator


class _InlineHost:
    """Stand-in host: the worker objects in this process, each on the CPU (the slot's accelerator index
    kept in the plan only); a call runs when it is submitted. Observes what a started worker would."""

    def __init__(self, slots, cls, args_of, timeout_s, watchdog, owns_ray=False):
        from rlbench.engines.host_messages import Call

        self._call_cls, self.timeout_s, self._n = Call, timeout_s, 0
        self._emitted, self._values = [], {}
        self.objs = {s.worker: cls(dataclasses.replace(s, kind="cpu", index=0), *args_of(s),
                                   emit=self._emitted.append) for s in slots}
        self.observed = {s.worker: {"threads": 1, "visible": str(s.index)} for s in slots}
        self.phases = {s.worker: {} for s in slots}  # start-up phases: none timed in this process
        self.pids = {}

    @property
    def workers(self):
        return list(self.objs)

    def submit(self, worker, method, *args):
        self._n += 1
        self._values[self._n] = getattr(self.objs[worker], method)(*args)
        return self._call_cls(worker, method, self._n)

    def wait(self, calls, doing, on_emit=None):
        while self._emitted:
            on_emit(self._emitted.pop(0))
        return [self._values.pop(c.ref) for c in calls]

    def close(self):
        for obj in self.objs.values():
            getattr(obj, "close", lambda: None)()


@pytest.mark.parametrize("schedule", ["sync", "periodic_async"])
def test_the_driver_never_touches_an_accelerator(monkeypatch, tmp_path, schedule):
    """A whole cell with engine.device=cuda on pretended GPUs (sync: one rank on 1 GPU, in-process
    stand-ins cannot form a process group; periodic_async: 1 + 1 on 2 GPUs): the driver loads the model, starts the
    workers, dispatches, evaluates (on the trainer's rank 0) and writes results without one CUDA call
    (torch.cuda's lazy init and is_available are counted, and this torch has no CUDA: a tensor moved there
    would fail)."""
    import torch

    from rlbench.core.config_files import load_config
    from rlbench.engines import hosts
    from rlbench.run.cell import run_cell

    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    inits = []

    def rlbench_asks():  # whether the caller of the patched function is not torch's own code
        return not sys._getframe(2).f_globals.get("__name__", "").startswith("torch.")

    def no_init(*a, **k):
        inits.append(1)
        raise AssertionError("the driver initialised CUDA")

    # asking CUDA whether it is there initialises its driver in the process (its workers are forked from
    # it): the driver counts devices through NVML (torch.cuda.device_count) instead
    monkeypatch.setattr(torch.cuda, "is_available", lambda: (rlbench_asks() and inits.append("is_available")) or True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1 if schedule == "sync" else 2)
    monkeypatch.setattr(torch.cuda, "_lazy_init", no_init)
    # torch 2.11's optimizers ask is_available at every step (the tiny model's warm start trains in the driver,
    # on the CPU; the stand-in workers here run in this process), then whether a CUDA graph is being captured:
    # torch's own probe, counted apart from rlbench's code (a CUDA build without the driver fails the second)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(hosts, "make_host", lambda launcher, *a, placement=None: _InlineHost(*a))
    cfg = load_config(os.path.join(ROOT, "configs", "cpu-tiny.yaml"),
                      ["engine.device=cuda", f"engine.schedule={schedule}", "run.iterations=2",
                       f"engine.share_devices={str(schedule == 'sync').lower()}",
                       "run.warmup_iterations=1", "run.eval_every=1",
                       "engine.compile=off"])  # pretended GPUs: no Triton to compile for (its own test: test_compile.py)
    res = run_cell(cfg, tmp_path / schedule, schedule, progress=False)
    assert res["status"] == "complete", res["error"]
    assert inits == []
    devices = {r["worker"]: r["device"] for r in res["placement"]}
    assert devices == ({"colocated0": "cuda:0", "driver": None} if schedule == "sync"
                       else {"rollout0": "cuda:0", "trainer0": "cuda:1", "driver": None})
    assert {r["worker"]: r["observed"]["cuda_initialized"] for r in res["placement"] if r["worker"] == "driver"} \
        == {"driver": False}
    assert [e["iteration"] for e in res["evals"]] == [0, 1, 2]  # on the worker, between iterations
    assert res["iterations"][-1]["host_cpu_s"]["driver"] >= 0


@pytest.mark.e2e
def test_evaluation_on_the_worker_equals_evaluation_in_process():
    """The trainer's rank 0 evaluates (the driver only scores) and gets the same answers as the in-process
    evaluation of the same weights."""
    from rlbench.core.config_files import load_config
    from rlbench.core.devices import device as dev
    from rlbench.core.devices.placement import plan
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.evaluation import InProcessEval, WorkerEval
    from rlbench.engines.factory import build_schedule
    from rlbench.engines.model.loader import load_policy
    from rlbench.core.record.stages import now

    cfg = load_config(os.path.join(ROOT, "configs", "cpu-tiny.yaml"), ["engine.schedule=periodic_async"])
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, _ = load_policy(cfg, dataset)
    placed, on_worker = build_schedule(cfg, policy, tok, now(), None, dev.resolve("cpu"), dataset=dataset,
                                    placement=plan(cfg.engine, "cpu", dev.available("cpu")))
    try:
        assert isinstance(on_worker, WorkerEval) and on_worker.device is None
        worker_res = on_worker(cfg, dataset, tok)
    finally:
        placed.close()
    policy, tok, _ = load_policy(cfg, dataset)
    local, here = build_schedule(cfg, policy, tok, now(), None, dev.resolve("cpu"), dataset=dataset)
    try:
        assert isinstance(here, InProcessEval)
        assert here(cfg, dataset, tok) == worker_res
    finally:
        local.close()
