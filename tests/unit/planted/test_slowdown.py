"""Planted regressions (RLBENCH_SLOW, bench/planted/slowdown.py): parsing, which cells and stages they reach,
and that a slowed stage's recorded duration grows by the fraction (no timing thresholds on the machine:
the busy-wait is compared with the stage's own measured duration)."""
from __future__ import annotations

import os

import pytest

from support.cli import rlbench

from rlbench.core.errors import UserError
from rlbench.planted import burn, slowdown
from rlbench.core.record.stages import Recorder, Stage

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
        "update": pytest.approx(0.15), "old_logprob": 0.05, "ref_logprob": 0.05, "handoff": 0.3}


def test_activate_exports_the_plan_for_worker_processes(monkeypatch):
    monkeypatch.setenv(slowdown.ENV, "update:0.5@periodic_async")
    assert slowdown.activate("+periodic_async", ASYNC) == {"update": 0.5}
    assert os.environ[slowdown.ACTIVE_ENV] == "update=0.5"
    assert burn.extra_seconds("update", 2.0) == 1.0 and burn.extra_seconds("rollout", 2.0) == 0.0
    assert slowdown.activate("sync", SYNC) == {}
    assert slowdown.ACTIVE_ENV not in os.environ and burn.extra_seconds("update", 2.0) == 0.0


def test_recorder_stage_grows_by_the_fraction(monkeypatch):
    """A slowed working stage busy-waits f x its own CPU time inside the stage; the queue wait f x its
    wall time; an unslowed stage nothing. Durations are compared with what the stage body measured
    of itself, so this holds on a busy machine too."""
    from rlbench.core import hooks

    monkeypatch.setenv(burn.ACTIVE_ENV, "update=1.0,queue_wait=0.5")
    hooks.reset()  # registered again from the environment just set (slowdown.activate does the same)
    monkeypatch.setattr(hooks, "_registered", {})  # ... and forgotten after this test
    burned = []
    real_burn = burn.burn
    monkeypatch.setattr(burn, "burn", lambda s, clock=burn.time.perf_counter:
                        (burned.append((s, clock)), real_burn(s, clock)))
    rec = Recorder("trainer0", t0=0.0)
    own = {}
    for stage in (Stage.UPDATE, Stage.QUEUE_WAIT, Stage.REWARD):
        with rec.stage(stage, 0):
            t, c = burn.time.perf_counter(), burn.time.thread_time()
            real_burn(0.05, burn.time.thread_time)  # the stage's own work: 0.05 s of CPU
            own[stage.value] = (burn.time.perf_counter() - t, burn.time.thread_time() - c)
    upd, queue, rew = rec.drain()
    (s_upd, clock_upd), (s_q, clock_q) = burned  # reward: no burn
    assert clock_upd is burn.time.thread_time and s_upd >= own["update"][1]
    assert clock_q is burn.time.perf_counter and s_q >= 0.5 * own["queue_wait"][0]
    assert upd.cpu >= 2 * own["update"][1] and upd.duration >= upd.cpu  # CPU time recorded too
    assert queue.duration >= 1.5 * own["queue_wait"][0]
    assert rew.cpu >= own["reward"][1]


def test_cli_rejects_a_bad_spec_before_running(tmp_path):
    p = rlbench("run", "--ablation", "async", "--out", tmp_path, "--no-report", "--no-progress",
                env={slowdown.ENV: "update:lots"}, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "RLBENCH_SLOW='update:lots'" in p.stderr and "0 < FRACTION" in p.stderr
    assert not any(tmp_path.iterdir())  # nothing run, no run folder


def test_targets_are_every_timed_stage_of_the_work():
    """slowdown.py reads them from the Stage enum (the timer imports no test hook: they register at its hook
    point, core/hooks.py)."""
    from rlbench.planted import slowdown
    from rlbench.core.record.stages import Stage

    assert set(slowdown.STAGES) == {s.value for s in Stage} - {Stage.EVAL.value, Stage.PAUSED.value}


def test_work_slows_every_working_stage_of_the_named_cell_only():
    plan = slowdown.stages_for("work:0.1@+tri_model", "+tri_model", ASYNC)
    assert plan["update"] == plan["rollout"] == plan["handoff"] == plan["optimizer_step"] == 0.1
    assert "queue_wait" not in plan and "eval" not in plan  # an idle wait and the evaluation are not its work
    assert slowdown.stages_for("work:0.1@+tri_model", "sync", SYNC) == {}
