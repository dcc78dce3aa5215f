"""Planted regressions (RLBENCH_SLOW, bench/slowdown.py): parsing, which cells and stages they reach,
and that a slowed stage's recorded duration grows by the fraction (no timing thresholds on the machine:
the busy-wait is compared with the stage's own measured duration)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlbench import slowdown
from rlbench.errors import UserError
from rlbench.stages import Recorder, Stage

ASYNC = {"schedule": "periodic_async", "shared_prompt": False}
PACKED = {"schedule": "periodic_async", "shared_prompt": True}
SYNC = {"schedule": "sync", "shared_prompt": False}


def test_parse_entries_and_cells():
    assert slowdown.parse("update:0.10@periodic_async, packing:0.2,queue:1@+tri_model") == [
        ("update", 0.10, "periodic_async"), ("packing", 0.2, None), ("queue", 1.0, "+tri_model")]
    assert slowdown.parse("") == []


@pytest.mark.parametrize("spec, words", [
    ("updat:0.1", "unknown target 'updat'"), ("update", "0 < FRACTION"), ("update:0", "0 < FRACTION"),
    ("update:-0.1", "0 < FRACTION"), ("update:x", "0 < FRACTION"), ("update:11", "<= 10"),
    ("update:0.1@", "no cell or schedule")])
def test_parse_rejects(spec, words):
    with pytest.raises(UserError, match="RLBENCH_SLOW") as e:
        slowdown.parse(spec)
    assert words in str(e.value)


def test_stages_for_selects_cells_schedules_and_packing():
    spec = "update:0.1@periodic_async,weight_sync:0.2@sync,packing:0.05,queue:0.3@+shared_prompt"
    assert slowdown.stages_for(spec, "+periodic_async", ASYNC) == {"update": 0.1}
    assert slowdown.stages_for(spec, "sync", SYNC) == {"weight_sync": 0.2}
    assert slowdown.stages_for(spec, "+shared_prompt", PACKED) == {
        "update": pytest.approx(0.15), "old_logprob": 0.05, "ref_logprob": 0.05, "queue_wait": 0.3}


def test_activate_exports_the_plan_for_worker_processes(monkeypatch):
    monkeypatch.setenv(slowdown.ENV, "update:0.5@periodic_async")
    assert slowdown.activate("+periodic_async", ASYNC) == {"update": 0.5}
    assert os.environ[slowdown.ACTIVE_ENV] == "update=0.5"
    assert slowdown.extra_seconds("update", 2.0) == 1.0 and slowdown.extra_seconds("rollout", 2.0) == 0.0
    assert slowdown.activate("sync", SYNC) == {}
    assert slowdown.ACTIVE_ENV not in os.environ and slowdown.extra_seconds("update", 2.0) == 0.0


def test_recorder_stage_grows_by_the_fraction(monkeypatch):
    """A slowed stage busy-waits f x its own duration inside the stage; an unslowed one does not. The
    body's duration is measured inside it, so the comparison holds on a busy machine too."""
    monkeypatch.setenv(slowdown.ACTIVE_ENV, "update=1.0")
    burned = []
    real_burn = slowdown.burn
    monkeypatch.setattr(slowdown, "burn", lambda s: (burned.append(s), real_burn(s)))
    rec = Recorder("trainer0", t0=0.0)
    inner = {}
    for stage in (Stage.UPDATE, Stage.REWARD):
        with rec.stage(stage, 0):
            start = slowdown.time.perf_counter()
            real_burn(0.05)  # the stage's own work
            inner[stage.value] = slowdown.time.perf_counter() - start
    upd, rew = rec.drain()
    assert len(burned) == 1 and burned[0] >= inner["update"]  # only update, by >= its own work
    assert upd.duration >= 2 * inner["update"]  # recorded: body + 1.0 x (body and the timer's overhead)
    assert rew.duration >= inner["reward"]


def test_cli_rejects_a_bad_spec_before_running(tmp_path):
    env = {**os.environ, slowdown.ENV: "update:lots"}
    p = subprocess.run([sys.executable, "-m", "rlbench.cli", "run", "--ablation", "async", "--out",
                        str(tmp_path), "--no-report", "--no-progress"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert "RLBENCH_SLOW='update:lots'" in p.stderr and "0 < FRACTION" in p.stderr
    assert not any(tmp_path.iterdir())  # nothing run, no run folder
