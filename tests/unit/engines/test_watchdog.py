"""The hang watchdog: unit tests of its rule, and a planted hang through the real `rlbench run`."""
import re
import time

import pytest

from conftest import TINY
from support.cli import clean_env, rlbench

from rlbench.engines.watchdog import Heartbeat, Watchdog
from rlbench.core.errors import WorkerError
from rlbench.core.results import schema


def hb(worker, beats, stage="rollout", longest=0.0):
    return Heartbeat(worker, beats, stage, 2, None, longest)


def test_idle_worker_is_not_watched():
    wd = Watchdog(limit_s=0.05, floor_s=1.0)
    wd.heartbeat(hb("rollout0", 1))
    time.sleep(0.1)
    wd.check("waiting", ["rollout0"])  # no call outstanding: quiet is fine


def test_worker_with_a_call_and_no_progress_is_hung():
    wd = Watchdog(limit_s=0.05, floor_s=1.0)
    wd.submitted("rollout0")
    wd.heartbeat(hb("rollout0", 7))
    time.sleep(0.03)
    wd.heartbeat(hb("rollout0", 7))  # alive, but the count did not move
    time.sleep(0.05)
    with pytest.raises(WorkerError, match=r"worker rollout0 made no progress .*in stage rollout of iteration 2"):
        wd.check("generating iteration 2", ["rollout0"])
    assert wd.hung == {"rollout0"}


def test_progress_restarts_the_clock_and_answers_end_the_watch():
    wd = Watchdog(limit_s=0.1, floor_s=1.0)
    wd.submitted("trainer0")
    for beats in range(5):
        time.sleep(0.04)
        wd.heartbeat(hb("trainer0", beats))  # 0.2 s in all, but progress every 0.04 s
        wd.check("training", ["trainer0"])
    wd.answered("trainer0")
    time.sleep(0.15)
    wd.check("training", ["trainer0"])


def test_a_host_judges_only_its_own_workers():
    """A trainer rank's replies and heartbeats wait in its host's queue while the producer thread waits on
    the rollout host; the rollout host must not call the unread trainer hung (it would, in a first rollout
    longer than the limit)."""
    wd = Watchdog(limit_s=0.05, floor_s=1.0)
    wd.submitted("trainer0")
    time.sleep(0.08)
    wd.check("generating iteration 0", ["rollout0"])
    with pytest.raises(WorkerError, match="trainer0"):
        wd.check("training iteration 0", ["trainer0"])


def test_auto_limit_is_factor_times_longest_stage_with_a_floor():
    wd = Watchdog(limit_s=None, floor_s=2.0, factor=10.0)
    assert wd.limit() == 2.0
    wd.heartbeat(hb("colocated0", 1, longest=0.5))
    assert wd.limit() == 5.0
    wd.heartbeat(hb("colocated1", 1, longest=0.1))  # the longest over every worker counts
    assert wd.limit() == 5.0


def test_silent_worker_is_hung_too():
    """A process frozen whole (its heartbeat thread cannot run either) sends nothing at all."""
    wd = Watchdog(limit_s=0.05, floor_s=1.0)
    wd.submitted("rollout1")
    time.sleep(0.08)
    with pytest.raises(WorkerError, match="rollout1 .*no heartbeat received"):
        wd.check("generating", ["rollout0", "rollout1"])


def planted_hang(tmp_path, schedule: str, sets: list[str]):
    """A worker hangs (alive, no progress) at iteration 2: -> (completed process, results of the cell)."""
    overrides = [a for s in [f"engine.schedule={schedule}", *sets] for a in ("--set", s)]
    t = time.monotonic()
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   "--no-report", *overrides, env={**clean_env(), "RLBENCH_FAULT": "rollout_hang:2"}, timeout=300)
    elapsed = time.monotonic() - t
    (run_dir,) = list(tmp_path.iterdir())
    res = schema.load_cell(run_dir / schedule)
    print(f"{schedule}: exit {proc.returncode} after {elapsed:.1f}s; cell ended "
          f"{res['wall_s_total'] - res['iterations'][-1]['end']:.1f}s after its last iteration")
    return proc, res


@pytest.mark.e2e
def test_planted_hang_ends_the_run_naming_worker_and_stage(tmp_path):
    proc, res = planted_hang(tmp_path, "periodic_async", ["engine.hang_timeout_s=4"])
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "hang watchdog: worker rollout0 made no progress" in proc.stderr
    assert "in stage rollout of iteration 2" in proc.stderr and "engine.hang_timeout_s=4s" in proc.stderr
    assert res["status"] == "failed" and "hang watchdog" in res["error"]
    assert [it["iteration"] for it in res["iterations"]] == [0, 1]  # measured iterations kept
    # Bounded: the limit plus closing the workers, not queue_timeout_s (300 s).
    assert res["wall_s_total"] - res["iterations"][-1]["end"] < 4 + 30


@pytest.mark.e2e
def test_planted_hang_auto_limit_from_measured_stages(tmp_path):
    """No fixed limit: 10x the longest stage so far, at least the floor (small here)."""
    proc, res = planted_hang(tmp_path, "sync", ["engine.hang_floor_s=3"])
    assert proc.returncode == 3, proc.stderr[-3000:]
    # Both ranks hang; the one whose quiet time crosses the limit first is named (both, when together).
    assert re.search(r"hang watchdog: worker colocated[01] made no progress .*in stage rollout of iteration 2",
                     proc.stderr)
    assert "10x the longest stage so far" in proc.stderr and "engine.hang_floor_s=3s" in proc.stderr
    assert [it["iteration"] for it in res["iterations"]] == [0, 1]
