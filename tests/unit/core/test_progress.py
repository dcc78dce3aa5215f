"""A worker's sign of progress for the hang watchdog (core/record/progress.py): every stage boundary and beat
counts, the stage being run and the last one that ended are kept, and the longest stage measured."""
import pytest

from rlbench.core.record import progress


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(progress, "_STATE", progress._State())


def test_stages_and_beats_count_and_the_stage_is_tracked():
    assert progress.snapshot() == progress.Snapshot(0, None, None, None, 0.0)
    progress.enter("rollout", 2)
    progress.beat()
    progress.beat()
    assert progress.snapshot() == progress.Snapshot(3, "rollout", 2, None, 0.0)
    progress.leave("rollout", 1.5)
    assert progress.snapshot() == progress.Snapshot(4, None, 2, "rollout", 1.5)


def test_the_longest_stage_is_kept_and_leaving_another_stage_keeps_the_current_one():
    progress.enter("update", 0)
    progress.leave("reward", 4.0)  # a nested stage ended inside update
    snap = progress.snapshot()
    assert (snap.stage, snap.last_stage, snap.longest_s) == ("update", None, 4.0)
    progress.leave("update", 2.0)
    assert progress.snapshot().longest_s == 4.0 and progress.snapshot().last_stage == "update"
