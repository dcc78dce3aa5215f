"""bounded_async: the staleness bound under random rollout/training delays (a fake pool and trainer:
this tests the scheduler, not the model), k = 0 equals sync, and the staleness ablation via the CLI."""
import json
import random
import time
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlbench.engines.rollout.base import Group, PromptRequest, SamplingParams, SealedGroup
from rlbench.engines.rollout.base import IterationEnd
from rlbench.engines.schedules.bounded_async.engine import BoundedAsyncSchedule, StalenessGate
from rlbench.engines.schedules.common import IterationInput
from rlbench.engines.trainer.trainer import Trainer
from rlbench.core.errors import WorkerError
from rlbench.core.record.stages import Recorder, now

from conftest import FAMILIES_ITERATIONS, TINY
from support.cli import only_run, rlbench, sets

pytestmark = pytest.mark.usefixtures("one_thread")  # in-process engines on tiny tensors

G = 2  # samples per prompt in the fake runs


class FakeTrainer:
    """The trainer interface the schedule drives, with a random pause per group instead of a model."""

    plan = SimpleNamespace(separate_phases=False)
    needs_old_pass = False
    world = 1  # one rank: Trainer.finish reduces nothing

    def __init__(self, rng: random.Random, max_delay_s: float):
        self.rng, self.max_delay_s, self.version = rng, max_delay_s, 0
        self.wait_until = None  # a condition each iteration waits for before training (no fixed sleeps)

    def begin(self):
        self.iteration_rewards = {}
        deadline = time.monotonic() + 30
        while self.wait_until is not None and not self.wait_until() and time.monotonic() < deadline:
            time.sleep(0.001)

    train = Trainer.train  # the real pipeline (the phases) over the fake parts below
    wait_trained = Trainer.wait_trained
    finish = Trainer.finish
    publish = Trainer.publish

    def close(self):
        pass

    def rewards(self, group, answer):
        return torch.zeros(len(group.responses))

    def advantages(self, r):
        return r

    def batches(self, groups, advantages):  # one "micro-batch" per group
        return list(groups)

    def accumulate(self, mb):
        time.sleep(self.rng.uniform(0, self.max_delay_s))

    def step(self):
        self.version += 1
        return {}

    def weights(self):
        return {}


class FakePool:
    """The rollout pool interface (publish / produce / close): one worker that loads the latest published
    weights at the batch boundary and emits the batch's groups in random order after random delays."""

    mailbox = None  # no partial rollout (RolloutPool.mailbox)
    gate = None  # never held between iterations (RolloutPool.gate)

    def __init__(self, trainer, rng: random.Random, max_delay_s: float, fail_at: int | None = None):
        self.trainer, self.rng, self.max_delay_s, self.fail_at = trainer, rng, max_delay_s, fail_at
        self.published = self.loaded = None
        self.dispatched: list[tuple[int, int]] = []  # (iteration, weight version it was generated with)
        self.closed = False

    def publish(self, weights, version, iteration):
        self.published = version

    def produce(self, iteration, requests, sampling, groups, timeout_s):
        assert sampling.iteration == iteration
        self.loaded = self.published  # the worker's "sync" message precedes this "generate"
        self.dispatched.append((iteration, self.loaded))
        if iteration == self.fail_at:
            groups.put(WorkerError(f"rollout worker died at iteration {iteration}"))
            return
        for r in self.rng.sample(requests, len(requests)):
            time.sleep(self.rng.uniform(0, self.max_delay_s))
            groups.put(SealedGroup.seal(Group(r.index, r.prompt_ids, [[1]] * sampling.n, [[0.0]] * sampling.n,
                                              version=self.loaded)))
        groups.put(IterationEnd([], [{"iteration": iteration}]))

    def close(self):
        self.closed = True


def _input(m: int, prompts: int) -> IterationInput:
    requests = [PromptRequest(i, [3, 4, 5 + i]) for i in range(prompts)]
    return IterationInput(m, requests, {i: "0" for i in range(prompts)}, SamplingParams(n=G, max_new_tokens=4, iteration=m))


def _run(k: int, iterations: int, prompts: int, rollout_s: float, train_s: float, seed: int = 0,
         order: str = "arrival", fail_at: int | None = None, rollout_ahead: bool = False):
    """-> (outputs, pool) of a bounded_async run over the fakes. rollout_ahead: every iteration starts
    training only once the producer has dispatched every batch the bound admits (rollout infinitely
    fast next to training, without relying on sleeps)."""
    trainer = FakeTrainer(random.Random(seed), train_s)
    pool = FakePool(trainer, random.Random(seed + 1), rollout_s, fail_at)
    if rollout_ahead:
        trainer.wait_until = lambda: len(pool.dispatched) >= min(trainer.version + k + 1, iterations)
    sched = BoundedAsyncSchedule(trainer, pool, Recorder("trainer", now()), lambda m: _input(m, prompts),
                                 iterations, k, order, timeout_s=10)
    outs = []
    try:
        for m in range(iterations):
            outs.append(sched.run_iteration(_input(m, prompts)))
    finally:
        sched.close()
    return outs, pool


def _staleness(out) -> list[int]:
    return [out.trained_version - g.version for g in out.groups]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(0, 3), iterations=st.integers(1, 6), prompts=st.integers(1, 3),
       rollout_s=st.sampled_from([0.0, 0.001, 0.003]), train_s=st.sampled_from([0.0, 0.001, 0.003]),
       order=st.sampled_from(["arrival", "dispatch"]), seed=st.integers(0, 2**16))
def test_staleness_bound_never_exceeded(k, iterations, prompts, rollout_s, train_s, order, seed):
    outs, pool = _run(k, iterations, prompts, rollout_s, train_s, seed, order)
    for m, out in enumerate(outs):
        assert out.trained_version == m
        assert sorted(g.prompt_index for g in out.groups) == list(range(prompts))  # every group, once
        if order == "dispatch":
            assert [g.prompt_index for g in out.groups] == list(range(prompts))
        assert all(0 <= s <= k for s in _staleness(out)), (m, _staleness(out))
        assert out.rollout_stats == [{"iteration": m}]  # the batch's own end marker
    # AReaL's admission rule at every dispatch: batch m needs version >= m - k, and batches go in order.
    assert [m for m, _ in pool.dispatched] == list(range(iterations))
    assert all(m - v <= k for m, v in pool.dispatched)
    assert pool.closed


@pytest.mark.parametrize("k", [0, 1, 2])
def test_fast_rollout_runs_exactly_k_ahead(k):
    """Instant rollout, slow training: the producer fills the bound, so iteration m trains on samples
    min(m, k) versions old (k = 0: strictly on-policy)."""
    outs, _ = _run(k, iterations=5, prompts=3, rollout_s=0.0, train_s=0.0, rollout_ahead=True)
    for m, out in enumerate(outs):
        assert set(_staleness(out)) == {min(m, k)}, (m, _staleness(out))


def test_worker_failure_reaches_the_trainer():
    with pytest.raises(WorkerError, match="died at iteration 2"):
        _run(1, iterations=4, prompts=2, rollout_s=0.0, train_s=0.0, fail_at=2)


def test_close_while_producer_waits_at_the_gate():
    trainer = FakeTrainer(random.Random(0), 0.0)
    pool = FakePool(trainer, random.Random(1), 0.0)
    sched = BoundedAsyncSchedule(trainer, pool, Recorder("trainer", now()), lambda m: _input(m, 2), 10, 1,
                                 "arrival", timeout_s=10)
    sched.run_iteration(_input(0, 2))  # batches 1 (and then 2, once version 1 exists) run ahead
    deadline = time.monotonic() + 5
    while len(pool.dispatched) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [m for m, _ in pool.dispatched] == [0, 1, 2]  # batch 3 waits for version 2 = 3 - k
    assert sched._producer.is_alive()  # ... blocked at the gate when close() comes
    t = time.monotonic()
    sched.close()
    assert time.monotonic() - t < 2 and not sched._producer.is_alive()
    assert [m for m, _ in pool.dispatched] == [0, 1, 2]  # batch 3 never went out


class OrderedTrainer(FakeTrainer):
    """A FakeTrainer that logs its requests in the order it gets them, as a trainer process answers them."""

    def __init__(self, *args):
        super().__init__(*args)
        self.log: list[tuple[str, int]] = []

    def begin(self):
        self.log.append(("train", self.version))  # the iteration's first training request
        super().begin()

    def publish(self, iteration):
        self.log.append(("publish", self.version))
        return {}


@pytest.mark.parametrize("seed", range(3))
def test_a_release_lets_the_waiting_producer_publish_before_the_iteration_trains(seed):
    """Between iterations the rollout workers are held; at the release the producer, waiting at the gate
    with the next batch, publishes the new version. The trainer answers in order, so that publish must reach
    it before the iteration's training does, or the next rollout waits behind a group's training."""
    from rlbench.engines.rollout.gate import RolloutGate

    trainer = OrderedTrainer(random.Random(seed), 0.002)
    pool = FakePool(trainer, random.Random(seed + 1), 0.0)
    pool.gate = RolloutGate()
    sched = BoundedAsyncSchedule(trainer, pool, Recorder("trainer", now()), lambda m: _input(m, 2), 6, 1,
                                 "arrival", timeout_s=10)
    try:
        for m in range(6):
            deadline = time.monotonic() + 10  # the case under test: the producer waits at the gate
            while m and m < 5 and not getattr(sched, "_waiting", True) and time.monotonic() < deadline:
                time.sleep(0.001)
            sched.run_iteration(_input(m, 2))
    finally:
        sched.close()
    for v in range(1, 5):  # version v is published when iteration v's release admits batch v + 1
        assert trainer.log.index(("publish", v)) < trainer.log.index(("train", v)), trainer.log


@given(k=st.integers(0, 4), batch=st.integers(1, 8), ops=st.lists(st.booleans(), max_size=40))
def test_gate_capacity(k, batch, ops):
    """Random interleavings of 'train one version' (True) and 'try to admit a batch' (False)."""
    gate, version = StalenessGate(k, batch), 0
    for op in ops:
        if op:
            version += 1
        elif gate.admit(batch, version):
            assert gate.submitted <= (k + version + 1) * batch
        else:
            assert gate.submitted + batch > (k + version + 1) * batch


def test_version_must_match_the_first_iteration():
    trainer = FakeTrainer(random.Random(0), 0.0)
    trainer.version = 3
    sched = BoundedAsyncSchedule(trainer, FakePool(trainer, random.Random(1), 0.0), Recorder("trainer", now()),
                                 lambda m: _input(m, 1), 2, 1, "arrival", timeout_s=10)
    with pytest.raises(ValueError, match="version"):
        sched.run_iteration(_input(0, 1))
    sched.close()


# ---------------------------------------------------------------- the real engine

def _train_params(overrides: list[str], iterations: int = 3):
    from rlbench.core.config_files import load_config
    from rlbench.core.devices import device as dev
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import iteration_input, build_schedule
    from rlbench.engines.model.loader import load_policy

    cfg = load_config(TINY, overrides + [f"run.iterations={iterations}", "run.warmup_iterations=0"])
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, _ = load_policy(cfg, dataset)
    init = {n: p.detach().clone() for n, p in policy.named_parameters()}
    events: list = []
    schedule, _ = build_schedule(cfg, policy, tok, now(), sink=events.append, device=dev.resolve("cpu"),
                              dataset=dataset)
    samples = []
    try:
        for k in range(iterations):
            out = schedule.run_iteration(iteration_input(cfg, dataset, tok, k))
            for g in sorted(out.groups, key=lambda g: g.prompt_index):
                samples.append((k, g.prompt_index, out.trained_version - g.version, [tuple(r) for r in g.responses]))
    finally:
        schedule.close()
    params = {n: p.detach().clone() for n, p in schedule.trainer.policy.named_parameters()}
    return init, params, samples, {e.stage for e in events}


def test_k0_equals_sync():
    """k = 0 is on-policy: the same samples as sync and the same update up to float rounding (not
    bitwise: the decoupled loss weights tokens by pi_prox / pi_behav, and the rollout's behaviour
    log-probs differ from the trainer's recomputed ones in the last bits)."""
    init, sync, s_samples, _ = _train_params(["engine.schedule=sync"])
    _, bounded, b_samples, stages = _train_params(["engine.schedule=bounded_async", "engine.max_staleness=0",
                                                   "engine.consume_order=dispatch"])
    assert s_samples == b_samples  # same prompts, same tokens, staleness 0
    assert "old_logprob" in stages  # prox_logp=recompute: the proximal forward pass
    assert any(not torch.equal(init[n], sync[n]) for n in sync)  # training moved the weights
    for n in sync:
        torch.testing.assert_close(bounded[n], sync[n], rtol=1e-5, atol=1e-6)


def test_staleness_ablation_cells():
    """`--ablation staleness`: sync, periodic-async, then bounded-async at k = 1, 2, 4 with each proximal
    policy, every cell's config carrying its switches."""
    from rlbench.core.config_files import load_config
    from rlbench.run.ablation import cells_for

    cells = cells_for("staleness", load_config(TINY))
    assert [n for n, _ in cells] == ["sync", "periodic_async"] + [f"bounded_k{k}_{p}" for k in (1, 2, 4)
                                                                  for p in ("recompute", "loglinear")]
    for name, cfg in cells[2:]:
        assert cfg.engine.schedule == "bounded_async"
        assert name == f"bounded_k{cfg.engine.max_staleness}_{cfg.train.prox_logp}"
    from rlbench.core import schedules

    assert cells[0][1].engine.schedule == "sync" and schedules.of(cells[1][1]).staleness(cells[1][1]) == 0
    assert "max_staleness" not in cells[1][1].switches()  # an option of the bounded schedules only


def assert_bounded_cell(folder, k: int, prox: str, iterations: int) -> None:
    """A complete bounded_async cell of the tiny config (4 prompts x G = 4 a step): its k and prox_logp
    recorded, no sample staler than k, the old-logprob pass only where prox_logp recomputes it."""
    res = json.loads((folder / "results.json").read_text())
    assert res["status"] == "complete" and len(res["iterations"]) == iterations
    assert res["config"]["engine"]["max_staleness"] == k and res["config"]["train"]["prox_logp"] == prox
    samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    stale = [s["trained_version"] - s["behaviour_version"] for s in samples]
    assert len(stale) == iterations * 4 * 4 and all(0 <= s <= k for s in stale)
    stages = {json.loads(line)["stage"] for line in (folder / "events.jsonl").read_text().splitlines()}
    assert ("old_logprob" in stages) == (prox != "loglinear")
    its = [json.loads(line) for line in (folder / "iterations.jsonl").read_text().splitlines()]
    # the decoupled loss' diagnostics, reduced over the ranks
    assert all(it["behav_imp_weight"] > 0 and 0 <= it["behav_capped"] <= 1 for it in its)


@pytest.mark.e2e
def test_bounded_async_cell_through_cli(tmp_path):
    """One cell of the staleness ablation as a user runs it (the whole ablation: 8 such cells), k = 1 with
    A-3PO's proximal log-probs (no forward pass for them)."""
    proc = rlbench("run", "--config", TINY, "--ablation", "none", "--out", tmp_path, "--no-progress", "--no-report",
                   *sets("engine.schedule=bounded_async", "engine.max_staleness=1", "train.prox_logp=loglinear"),
                   timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (folder,) = [p for p in only_run(tmp_path).iterdir() if (p / "results.json").is_file()]
    assert_bounded_cell(folder, 1, "loglinear", 3)


@pytest.mark.e2e
def test_the_families_k2_rung_is_a_bounded_cell_with_recomputed_prox(families_run):
    """k = 2 with the proximal log-probs recomputed (the default): the families ladder's k2 rung, run through
    the CLI (conftest.py's shared run)."""
    _, run_dir = families_run
    assert_bounded_cell(run_dir / "k2", 2, "recompute", FAMILIES_ITERATIONS)
