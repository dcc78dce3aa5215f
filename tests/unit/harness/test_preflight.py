"""The checks before a run that need torch and transformers run in a process of the cells' context
(bench/run/around.py `in_process`): what they raise reaches `rlbench run` as if they had run there.
That `rlbench run`'s own process then imports neither: tests/unit/core/test_limits.py (a refusal from that process)."""
import multiprocessing

import pytest

from rlbench.core.devices import device
from rlbench.core.errors import UserError
from rlbench.run import around


@pytest.fixture(scope="module")
def ctx():
    """spawn: a fresh interpreter (the fork server's is the same process code, with its imports done)."""
    return multiprocessing.get_context("spawn")


def test_a_refusal_there_is_the_same_refusal_here(ctx):
    """The UserError's message comes back whole; a check that passes returns nothing."""
    with pytest.raises(UserError) as refused:
        around.in_process(ctx, around.new_run_dir, "/proc/no-such-folder", "x")
    assert str(refused.value).startswith("--out /proc/no-such-folder: cannot create the run folder")
    assert around.in_process(ctx, around.raise_failed, {"cells": [{"name": "sync", "exit_code": 0}]}) is None


def test_a_crash_there_is_not_taken_for_bad_input(ctx):
    """Anything but a UserError (a bug, its traceback printed by that process) fails the run, not exit 2."""
    with pytest.raises(RuntimeError, match=r"the checks before the run failed \(exit code 1; see above\)"):
        around.in_process(ctx, around.raise_failed, {"cells": "not a list of cells"})


def test_the_checks_before_a_gpu_run_never_initialise_cuda(monkeypatch):
    """Every check before a run on (pretended) GPUs, here in one process as where the cells spawn: devices
    are counted through NVML (torch.cuda.device_count), never by asking CUDA (is_available, lazy init),
    which would leave the process unable to fork a process that uses CUDA."""
    import torch

    from conftest import TINY
    from rlbench.core.config_files import load_config

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append("is_available") or True)
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda *a, **k: asked.append("_lazy_init"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(device, "triton_installed", lambda: True)  # engine.compile's default on CUDA: all
    cfg = load_config(TINY, ["engine.device=cuda", "engine.schedule=periodic_async"])
    around.preflight(cfg, [("periodic_async", cfg)], multiprocessing.get_context("spawn"))
    assert asked == []
    with pytest.raises(UserError, match="ask for 3 devices, but this machine has 2 cuda devices"):  # the count read
        around.preflight(load_config(TINY, ["engine.device=cuda", "engine.train_devices=2"]), [],
                         multiprocessing.get_context("spawn"))
    assert asked == []
