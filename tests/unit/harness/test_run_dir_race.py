"""Runs started at once: each gets its own run folder (bench/run/around.py new_run_dir), and a warm start
that another run finished first leaves no temporary folder behind (engines/model/tiny.py publish)."""
from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

from rlbench.run import around

PER_PROCESS = 150


def _make_many(root: str, queue) -> None:
    made = []
    for _ in range(PER_PROCESS):
        made.append(str(around.new_run_dir(Path(root), "same")))
    queue.put(made)


def test_two_processes_creating_many_run_dirs_at_once_each_get_their_own(tmp_path):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_make_many, args=(str(tmp_path), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    made = [d for _ in procs for d in queue.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0  # no "File exists" refusal
    assert len(made) == len(set(made)) == 2 * PER_PROCESS
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(Path(d).name for d in made)


def test_a_name_taken_by_a_file_moves_on_and_an_unwritable_root_is_bad_input(tmp_path):
    from rlbench.core.errors import UserError

    first = around.new_run_dir(tmp_path, "x")
    (first.parent / (first.name + "-1")).write_text("not a folder")
    second = around.new_run_dir(tmp_path, "x")
    assert second.is_dir() and second.name not in (first.name, first.name + "-1")
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="cannot create the run folder"):
        around.new_run_dir(tmp_path / "file", "x")


def test_a_warm_start_that_loses_the_race_removes_its_temporary_folder(tmp_path, monkeypatch):
    """Another run publishes the same key while this one trains: this one's weights are dropped, the cache keeps
    the winner's, and no tiny-<key>.tmp<pid> folder stays."""
    from rlbench.core.config_files import load_config
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.data.task import format_prompt
    from rlbench.engines.model import tiny

    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path))
    cfg = load_config(None, ["model.warmstart_steps=1"])
    folder = tmp_path / f"tiny-{tiny.cache_key(cfg)}"

    def other_run_finishes_first(*args, **kw):  # while this one trains (its steps left out: not the point)
        folder.mkdir()
        (folder / "winner").write_text("")
        return [0.5]

    monkeypatch.setattr(tiny, "warm_start", other_run_finishes_first)
    problems = load_dataset(cfg.data, cfg.run.seed).train
    _, _, info = tiny.load_or_warm_start(cfg, problems, format_prompt)
    assert info["cached"] is False and (folder / "winner").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # no .tmp<pid> left


def test_publish_moves_into_place_or_drops_the_loser(tmp_path):
    from rlbench.engines.model.tiny import publish

    tmp, folder = tmp_path / "k.tmp1", tmp_path / "k"
    tmp.mkdir()
    (tmp / "w").write_text("mine")
    publish(tmp, folder)
    assert (folder / "w").read_text() == "mine" and not tmp.exists()
    tmp.mkdir()
    (tmp / "w").write_text("late")
    publish(tmp, folder)
    assert (folder / "w").read_text() == "mine" and not tmp.exists()
