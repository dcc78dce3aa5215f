"""How `rlbench run` seats its cells in a turn ring (bench/run/processes.py ring_seats): a ring of its own,
removed by the caller at the end, or the side of the shared ring RLBENCH_RING names (`check --against`)."""
import shutil

from rlbench.run import interleave
from rlbench.run.processes import ring_seats

CELLS = [("sync", None, None), ("periodic_async", None, None)]


def test_a_run_alone_makes_a_ring_of_its_own(monkeypatch):
    monkeypatch.delenv(interleave.ENV, raising=False)
    seats, folder = ring_seats(CELLS, None)
    try:
        assert folder is not None and folder.is_dir()
        assert [(s.side, s.index) for s in seats] == [(0, 0), (0, 1)]
    finally:
        shutil.rmtree(folder)


def test_a_side_of_a_shared_ring_takes_its_seats_there_and_leaves_the_ring_alone(tmp_path, monkeypatch):
    interleave.Ring.create(tmp_path / "ring", sides=2)
    monkeypatch.setenv(interleave.ENV, f"{tmp_path / 'ring'}:1")
    seats, folder = ring_seats(CELLS, None)
    assert folder is None  # the ring is the caller's (check --against), not this run's to remove
    assert [(s.side, s.index) for s in seats] == [(1, 0), (1, 1)]
