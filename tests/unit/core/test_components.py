"""The registries of schedules (core/schedules/) and rollout backends (core/components.py) are what config,
switches and the engine factory read; every registered component has its code in the engines
(engines/schedules/__init__.py, engines/rollout/backends.py, engines/trainer/logprob_plans.py)."""
import typing

import pytest
from rlbench.core import components, schedules
from rlbench.core.config import EngineConfig, RolloutConfig, RunConfig
from rlbench.core.config_files import with_overrides
from rlbench.engines.rollout.pool import RolloutPool
from rlbench.engines.schedules.bounded_async.engine import BoundedAsyncSchedule
from rlbench.engines.schedules.common import RolloutSource, Schedule, SupportsTraining
from rlbench.engines.schedules.periodic_async.engine import PeriodicAsyncSchedule
from rlbench.engines.schedules.sync.engine import DataParallelSync, SyncSchedule
from rlbench.engines.trainer.distributed import DataParallelTrainer
from rlbench.engines.trainer.trainer import Trainer as InProcessTrainer
from rlbench.simulate import SCHEDULES as SIMULATED


def test_config_choices_are_the_registry():
    assert set(typing.get_args(EngineConfig.model_fields["schedule"].annotation)) == set(schedules.SCHEDULES)
    assert set(typing.get_args(RolloutConfig.model_fields["backend"].annotation)) == set(components.BACKENDS)
    assert set(SIMULATED) == set(schedules.SCHEDULES)  # rlbench simulate models every schedule


@pytest.mark.parametrize("name", sorted(schedules.SCHEDULES))
def test_every_schedule_builder_resolves(name):
    from rlbench.engines.schedules import ENGINES, engine_of

    assert set(ENGINES) == set(schedules.SCHEDULES)
    engine = engine_of(schedules.SCHEDULES[name])
    build = engine.build
    assert callable(build) and build.__name__ == "build" and build.__module__.startswith("rlbench.engines.schedules.")
    if engine.build_in_process:
        assert callable(engine.build_in_process)


@pytest.mark.parametrize("name", sorted(components.BACKENDS))
def test_every_backend_builder_resolves(name):
    from rlbench.engines.rollout.backends import BUILDERS

    assert set(BUILDERS) == set(components.BACKENDS)
    build = BUILDERS[name]  # importable without vLLM: it is imported lazily
    assert callable(build) and build.__module__.startswith("rlbench.engines.rollout.")


def test_every_packing_impl_has_its_function():
    from rlbench.engines.trainer.logprob_plans import PACKED

    assert set(PACKED) == set(components.PACKING_IMPLS) and all(map(callable, PACKED.values()))


def test_backend_spec_carries_the_backends_own_options():
    from rlbench.engines.rollout import backend_spec

    cfg = with_overrides(RunConfig(), {"rollout": {"backend": "vllm", "max_model_len": 512}})
    assert backend_spec(cfg) == {"backend": "vllm", "dtype": cfg.model.dtype, "seed": 0, "compile": None,
                                 "gpu_memory_utilization": 0.4, "max_model_len": 512}
    assert backend_spec(RunConfig()) == {"backend": "builtin", "dtype": RunConfig().model.dtype, "seed": 0,
                                         "compile": None, "cuda_graphs": None}


def test_options_are_read_from_their_config_keys():
    cfg = with_overrides(RunConfig(), {"engine": {"schedule": "bounded_async", "max_staleness": 3},
                                       "train": {"prox_logp": "loglinear"}})
    opts = schedules.SCHEDULES["bounded_async"].read(cfg)
    assert (opts.max_staleness, opts.prox_logp, opts.consume_order) == (3, "loglinear", "arrival")
    sw = cfg.switches()
    assert sw["max_staleness"] == 3 and sw["prox_logp"] == "loglinear"
    assert "overlap" not in sw and "sync_layout" not in sw  # other schedules' options do not apply
    sync = RunConfig().switches()
    assert sync == {"schedule": "sync", "tri_model": False, "shared_prompt": False, "sync_layout": "data_parallel"}


def test_a_config_section_is_made_of_the_options_its_components_declare():
    """Each option's default and help text are written once, in its component's options model; the config
    section takes them from there, and two different declarations of one key are refused."""
    from pydantic import Field

    from rlbench.core.components import BACKENDS, Options, option_fields
    from rlbench.core.config import EngineConfig, RolloutConfig, TrainConfig

    for spec in [*schedules.SCHEDULES.values(), *BACKENDS.values()]:
        for name, f in spec.options.model_fields.items():
            section, key = f.json_schema_extra["key"].split(".")
            got = {"engine": EngineConfig, "train": TrainConfig, "rollout": RolloutConfig}[section].model_fields[key]
            assert (got.default, got.description) == (f.default, f.description), (spec.name, name)

    class A(Options):
        x: int = Field(1, description="one", json_schema_extra={"key": "engine.x"})

    class B(Options):
        x: int = Field(2, description="two", json_schema_extra={"key": "engine.x"})

    fake = [type("C", (), {"name": n, "options": o}) for n, o in (("a", A), ("b", B))]
    with pytest.raises(TypeError, match="engine.x is declared twice"):
        option_fields(fake, "engine")


def test_a_schedule_refuses_what_it_cannot_do():
    with pytest.raises(Exception, match="ppo_mini_batches must be 1 with engine.schedule=periodic_async"):
        with_overrides(RunConfig(), {"engine": {"schedule": "periodic_async"}, "train": {"ppo_mini_batches": 2}})


def test_the_engines_implement_the_protocols():
    def has(cls, proto):
        names = [n for n in vars(proto) if not n.startswith("_") and callable(getattr(proto, n))]
        return names and all(callable(getattr(cls, n, None)) for n in names)

    assert has(InProcessTrainer, SupportsTraining) and has(DataParallelTrainer, SupportsTraining)
    assert has(RolloutPool, RolloutSource)
    for cls in (SyncSchedule, DataParallelSync, PeriodicAsyncSchedule, BoundedAsyncSchedule):
        assert has(cls, Schedule), cls
    assert not has(RolloutPool, SupportsTraining)  # the check can fail
