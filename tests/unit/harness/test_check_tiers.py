"""The CI gate's tiers (bench/check/tiers.py, scripts/ci_bench.sh): together their cells run every registered
schedule and partial rollout, and the schedules tier runs exactly when code only its cells run changed since
the accepted commit."""
from __future__ import annotations

import subprocess

from rlbench.check import against, tiers
from rlbench.core.config_files import load_config
from rlbench.core.results.provenance import source_root
from rlbench.core.schedules import SCHEDULES
from rlbench.run.ablation import cells_for

ROOT = source_root()


def test_the_tiers_cells_cover_every_registered_schedule_and_partial_rollout():
    cells = [cfg for t in tiers.TIERS for _, cfg in cells_for(t.ablation, load_config(ROOT / t.config))]
    assert {c.engine.schedule for c in cells} == set(SCHEDULES)
    assert any(c.engine.partial_rollout for c in cells)
    main = {c.engine.schedule for _, c in cells_for("ci", load_config(ROOT / "configs/ci-ab.yaml"))}
    assert main < set(SCHEDULES)  # what the main tier alone leaves out is what the schedules tier is for


def _git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_schedules_tier_runs_when_a_schedule_file_changed_since_the_accepted_commit(tmp_path, monkeypatch):
    _git(tmp_path.parent, "init", "-q", "-b", "main", str(tmp_path))
    for path in ("engines/schedules/sync/engine.py", "engines/trainer/trainer.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x = 1\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "accepted")
    (tmp_path / against.ACCEPTED).parent.mkdir(parents=True)
    (tmp_path / against.ACCEPTED).write_text(_git(tmp_path, "rev-parse", "HEAD") + "\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "accept it")
    monkeypatch.setattr(tiers, "source_root", lambda: tmp_path)
    monkeypatch.setattr(against, "source_root", lambda: tmp_path)

    def names():
        return [t.name for t, _ in tiers.to_run("accepted")]

    (tmp_path / "engines/trainer/trainer.py").write_text("x = 2\n")  # shared code: the main tier covers it
    assert names() == ["main"]
    (tmp_path / "engines/schedules/sync/README.md").write_text("the schedule's page\n")  # docs: not counted
    assert names() == ["main"]
    (tmp_path / "engines/schedules/sync/engine.py").write_text('"""The engine."""\nx = 1  # one\n')
    assert names() == ["main"]  # a comment and a docstring: the same code, not counted
    (tmp_path / "engines/schedules/sync/engine.py").write_text("x = 2\n")  # not committed: counted
    assert names() == ["main", "schedules"]
    _git(tmp_path, "checkout", "--", "engines/schedules")
    (tmp_path / "engines/schedules/new_one").mkdir()
    (tmp_path / "engines/schedules/new_one/__init__.py").write_text("")  # untracked: counted too
    assert names() == ["main", "schedules"]
