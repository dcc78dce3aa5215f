"""A cell's start-up (docs/results/startup.md): its phases in `rlbench report --wide`, the evaluation's token
budget, and the start method of cell processes, which hold no accelerator unless their schedule runs in them."""
from pathlib import Path

import pytest

from conftest import TINY

from rlbench.analysis.data import CellData, RunData
from rlbench.analysis.startup import startup_rows
from rlbench.core.config_files import load_config
from rlbench.core.devices import starting
from rlbench.engines.evaluation import eval_max_new_tokens
from rlbench.reports.startup_text import startup_lines
from rlbench.run.ablation import cell_context, holds_device


def _cell(name: str, phases: dict, weights: str) -> CellData:
    life = {"startup_phases": phases, "first_iteration_s": 4.5, "startup_s": 9.0,
            "peak_rss_mb": {"driver": 300.0, "trainer0": 900.0, "rollout0": 700.0}}
    return CellData(name, Path(name), {"cell": name, "lifecycle": life, "model": {"weights": weights}})


def test_the_wide_report_shows_each_phase_as_long_as_its_slowest_process():
    phases = {"driver": {"imports": 0.4, "model": 6.0, "workers": 3.0, "first_eval": 2.0},
              "trainer0": {"imports": 0.3, "weights_in": 0.2, "optimizer_ref": 0.1},
              "rollout0": {"imports": 0.9, "weights_in": 0.5}}
    run = RunData(Path("."), "ablation", "a", "sync", [_cell("sync", phases, "built"),
                                                       CellData("old", Path("old"), {"lifecycle": {"startup_s": 80}})])
    rows = startup_rows(run)
    assert len(rows) == 1  # a cell without phases (an older result) has no row
    r = rows[0]
    assert (r["imports"], r["weights_in"], r["model"], r["worker_peak_rss_mb"]) == (0.9, 0.5, 6.0, 900.0)
    text = "\n".join(startup_lines(rows))
    assert "weights in" in text and "optimizer ref" in text and "built" in text and "4.5" in text
    assert max(len(line) for line in startup_lines(rows)) <= 100
    assert startup_lines([]) == []


@pytest.mark.parametrize("budget, problems, expected", [(None, 16, 384), (2048, 16, 128), (10**6, 16, 384),
                                                        (8, 16, 1)])
def test_the_evaluation_stops_within_its_token_budget(budget, problems, expected):
    cfg = load_config(TINY, ["rollout.max_new_tokens=384"] + ([f"run.eval_token_budget={budget}"] if budget else []))
    assert eval_max_new_tokens(cfg, problems) == expected


def test_a_token_budget_of_zero_is_refused_naming_the_key():
    from rlbench.core.errors import UserError

    with pytest.raises(UserError, match="run.eval_token_budget"):
        load_config(TINY, ["run.eval_token_budget=0"])


def test_cells_on_a_gpu_are_forked_and_on_an_npu_spawned_where_they_hold_it(monkeypatch):
    """The driver holds no accelerator, so it is forked on a GPU as on CPU; a cell whose schedule runs in its
    own process (single_process sync) holds the device: forked on a GPU from `rlbench run`'s server (a
    fresh interpreter that never touched CUDA), spawned on an NPU (torch_npu has not run forked)."""
    monkeypatch.delenv(starting.ENV, raising=False)
    gpu = load_config(TINY, ["engine.device=cuda"])
    inside = load_config(TINY, ["engine.device=cuda", "engine.schedule=sync", "engine.sync_layout=single_process"])
    npu_inside = load_config(TINY, ["engine.device=npu", "engine.schedule=sync", "engine.sync_layout=single_process"])
    cpu_inside = load_config(TINY, ["engine.schedule=sync", "engine.sync_layout=single_process"])
    assert (holds_device(gpu), holds_device(inside), holds_device(cpu_inside)) == (False, True, False)
    assert cell_context([gpu, gpu]).get_start_method() == "forkserver"
    assert cell_context([gpu, inside]).get_start_method() == "forkserver"
    assert cell_context([gpu, npu_inside]).get_start_method() == "spawn"
    monkeypatch.setenv(starting.ENV, "spawn")
    assert cell_context([gpu]).get_start_method() == "spawn"
