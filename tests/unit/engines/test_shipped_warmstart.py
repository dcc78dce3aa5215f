"""The default config's warm start ships in the package (engines/model/shipped.py): a first `rlbench run`
loads it instead of training 500 steps; it is the default config's (a change to the warm-start code or
the default config fails here until it is rebuilt); and rebuilding it gives the same bits (tier `slow`)."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from rlbench.core.config_files import load_config
from rlbench.engines.data.source import load_dataset
from rlbench.engines.data.task import format_prompt
from rlbench.engines.model import tiny
from rlbench.engines.model.tiny import SHIPPED

REBUILD = "python -m rlbench.engines.model.shipped build  (about 1-2 minutes on 2 cores)"


def _tensors(folder) -> dict:
    return load_file(str(folder / "model.safetensors"))


def test_the_shipped_warm_start_is_the_default_configs():
    cfg = load_config(None, [])
    assert (SHIPPED / "model.safetensors").is_file()
    assert tiny.shipped_for(cfg) == SHIPPED, (
        "the warm-start code or the default config changed since the shipped warm start was built: "
        + REBUILD)
    info = json.loads((SHIPPED / "warmstart.json").read_text())
    assert info["steps"] == cfg.model.warmstart_steps
    # another seed, model or data shapes another warm start: the shipped one serves none of them
    for change in ("run.seed=1", "model.hidden_size=64", "data.max_steps=3", "model.warmstart_steps=10"):
        assert tiny.shipped_for(load_config(None, [change])) is None, change


def test_a_first_run_loads_the_shipped_weights_and_trains_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(tiny, "warm_start", lambda *a, **k: pytest.fail("a warm start ran"))
    cfg = load_config(None, [])
    model, _, info = tiny.load_or_warm_start(cfg, load_dataset(cfg.data, cfg.run.seed).train, format_prompt)
    assert info["shipped"] and info["cached"] and info["steps"] == cfg.model.warmstart_steps
    shipped = _tensors(SHIPPED)
    state = model.state_dict()
    assert all(torch.equal(state[name], t) for name, t in shipped.items())
    assert not list(tmp_path.iterdir())  # nothing was cached: nothing was made


@pytest.mark.slow
def test_rebuilding_gives_the_shipped_weights_bit_for_bit(tmp_path):
    """The build's recipe (AVX2 kernels, two threads, a fresh interpreter) from the current code: every
    tensor equal to the shipped one bit for bit, and the same key and loss."""
    from rlbench.engines.model import shipped

    shipped.build(tmp_path)
    new, old = _tensors(tmp_path), _tensors(SHIPPED)
    assert new.keys() == old.keys()
    different = [n for n in old if new[n].dtype != old[n].dtype or not torch.equal(new[n].view(torch.int32),
                                                                                  old[n].view(torch.int32))]
    assert not different, f"rebuilt tensors differ: {different[:5]}"
    built, kept = (json.loads((f / "warmstart.json").read_text()) for f in (tmp_path, SHIPPED))
    assert built == kept


def test_prose_keeps_the_key_and_code_changes_it(tmp_path):
    """A docstring or comment edited (a path renamed in prose) keeps the warm start; a change of code does
    not."""
    from rlbench.engines.model.tiny import code_digest

    def digest(text: str):
        path = tmp_path / "m.py"
        path.write_text(text)
        return code_digest(path)

    base = digest('"""The module."""\ndef f():\n    """Doc."""\n    return 1  # one\n')
    assert digest('"""Moved: core/x.py."""\n\ndef f():\n    """Other."""\n    return 1\n') == base
    assert digest('"""The module."""\ndef f():\n    """Doc."""\n    return 2  # one\n') != base
