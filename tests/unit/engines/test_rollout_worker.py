"""What a rollout worker process is told about its backend (engines/rollout/worker.py backend_spec): the
configured backend by name, with the run's dtype, seed and engine.compile and the backend's own options."""
import json

from conftest import TINY

from rlbench.core.components import BACKENDS
from rlbench.core.config_files import load_config
from rlbench.engines.rollout.worker import EVALUATION, backend_spec


def test_the_spec_carries_the_runs_settings_and_is_json():
    cfg = load_config(TINY, ["run.seed=11"])
    spec = backend_spec(cfg)
    assert spec["backend"] == cfg.rollout.backend
    assert (spec["dtype"], spec["seed"], spec["compile"]) == (cfg.model.dtype, 11, cfg.engine.compile)
    options = BACKENDS[cfg.rollout.backend].read(cfg).model_dump()
    assert {k: spec[k] for k in options} == options
    assert json.loads(json.dumps(spec)) == spec  # what worker processes receive as an argument


def test_the_evaluation_backend_is_a_registered_one():
    assert EVALUATION["backend"] in BACKENDS
