"""On-policy equivalence (docs/architecture/schedules.md, 'Periodic asynchrony'): periodic-async == sync, every switch
combination.

With groups consumed in dispatch order the parameters after 3 iterations are bitwise identical;
in arrival order they differ only by floating-point summation order.
"""
import functools
import itertools

import pytest
import torch

from rlbench.core.config_files import load_config
from rlbench.core.record.stages import now

from conftest import TINY

pytestmark = pytest.mark.usefixtures("one_thread")  # in-process engines on tiny tensors


@functools.cache
def trained(overrides: tuple[str, ...], iterations: int = 3):
    """train_params, each distinct run once per session (callers only read it): the plain sync run is the
    reference of two tests."""
    return train_params(list(overrides), iterations)


def train_params(overrides: list[str], iterations: int = 3):
    from rlbench.core.devices import device as dev
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import iteration_input, build_schedule
    from rlbench.engines.model.loader import load_policy

    cfg = load_config(TINY, overrides + [f"run.iterations={iterations + 1}", "run.warmup_iterations=0"])
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, _ = load_policy(cfg, dataset)
    schedule, _ = build_schedule(cfg, policy, tok, now(), sink=None, device=dev.resolve("cpu"))
    samples = []
    try:
        for k in range(iterations):
            out = schedule.run_iteration(iteration_input(cfg, dataset, tok, k))
            for g in sorted(out.groups, key=lambda g: g.prompt_index):
                samples.append((k, g.prompt_index, [tuple(r) for r in g.responses]))
                assert g.version == out.trained_version == k  # staleness 0
    finally:
        schedule.close()
    return {n: p.detach().clone() for n, p in schedule.trainer.policy.named_parameters()}, samples


@functools.cache
def initial_params() -> dict:
    """The policy's parameters before any iteration: every switch and schedule starts from the same warm
    start (the engine.* keys do not shape it: engines/model/tiny.py cache_key), so one load serves all."""
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.model.loader import load_policy

    cfg = load_config(TINY, [])
    policy, _, _ = load_policy(cfg, load_dataset(cfg.data, cfg.run.seed))
    return {n: p.detach().clone() for n, p in policy.named_parameters()}


# auto packs per group by the cost model; sync and periodic-async see the same groups, so the same choices
SWITCHES = list(itertools.product([False, True], [False, True])) + [(False, "auto")]


@pytest.mark.parametrize("tri_model, shared_prompt", SWITCHES)
def test_periodic_async_equals_sync_bitwise(tri_model, shared_prompt):
    sw = (f"engine.tri_model={tri_model}", f"engine.shared_prompt={shared_prompt}")
    sync, s_samples = trained(sw + ("engine.schedule=sync",))
    asyn, a_samples = train_params([*sw, "engine.schedule=periodic_async", "engine.consume_order=dispatch"])
    assert s_samples == a_samples  # same samples from the same weights
    init = initial_params()
    assert any(not torch.equal(init[n], sync[n]) for n in sync)  # training moved the weights
    for n in sync:
        assert torch.equal(sync[n], asyn[n]), n


def test_periodic_async_arrival_order_close():
    sync, _ = trained(("engine.tri_model=False", "engine.shared_prompt=False", "engine.schedule=sync"))
    asyn, _ = train_params(["engine.schedule=periodic_async", "engine.consume_order=arrival"])
    for n in sync:
        torch.testing.assert_close(asyn[n], sync[n], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("schedule", [("engine.schedule=sync",),
                                      ("engine.schedule=periodic_async", "engine.consume_order=arrival")],
                         ids=["sync", "periodic_async"])
def test_a_token_budget_gives_the_same_update(schedule):
    """train.micro_batch_tokens (docs/architecture/schedules.md, 'Micro-batches by token budget'): sync packs its
    batch, periodic-async the groups that have arrived; the update equals one group per micro-batch's up to
    summation order, and the samples are the same."""
    sync, s_samples = trained(("engine.tri_model=False", "engine.shared_prompt=False", "engine.schedule=sync"))
    got, samples = train_params([*schedule, "train.micro_batch_tokens=300"])
    assert samples == s_samples
    for n in sync:
        torch.testing.assert_close(got[n], sync[n], rtol=1e-5, atol=1e-6)
