"""`rlbench check --against REF` (bench/check/against.py): REF is resolved in this clone (missing -> exit 2, never
a pass), an old tree without the turn ring is refused, and a real A/B run of the two trees takes turns
iteration by iteration with a planted slowdown reaching the new tree only, and failing there."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TINY
from support.cli import rlbench, sets

from rlbench.check import against
from rlbench.core.errors import UserError
from rlbench.core.results import schema

PRE_RING = "78b7d34"  # the last commit before `check --against` existed (its interleave.py has no ring)


def test_an_unknown_ref_is_an_error_that_says_why():
    with pytest.raises(UserError, match="not in this clone"):
        against.resolve("0123456789abcdef0123456789abcdef01234567")


def test_accepted_names_a_commit_this_clone_has():
    named, sha = against.resolve("accepted")
    lines = [line for line in (ROOT / against.ACCEPTED).read_text().splitlines() if not line.startswith("#")]
    assert named.startswith("accepted") and sha == lines[0].strip() and len(sha) == 40


def test_a_missing_accepted_file_is_an_error(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(UserError, match="ACCEPTED not found"):
        against.resolve("accepted", repo=tmp_path)


def test_a_tree_without_the_turn_ring_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path))
    _, sha = against.resolve(PRE_RING)
    with pytest.raises(UserError, match="predates"):
        against.materialise(sha)
    assert not (tmp_path / "trees" / sha).exists()  # nothing half-made is kept


def test_the_shim_imports_the_old_tree_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path))
    _, sha = against.resolve("HEAD")
    shim = against.materialise(sha)
    code = "import rlbench.core.config_files as c, rlbench.engines.factory as f; print(c.CONFIG_DIR, f.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(shim)},
                         capture_output=True, text=True, check=True).stdout.split()
    tree = tmp_path / "trees" / sha / "tree"
    assert out == [str(tree / "configs"), str(tree / "engines" / "factory.py")]
    assert (Path(out[0]) / "cpu-default.yaml").is_file()


@pytest.mark.e2e
def test_a_real_ab_run_interleaves_and_catches_a_planted_decode_slowdown(tmp_path):
    """HEAD (old) and this tree (new), one sync cell of cpu-tiny, 12 iterations: the sampler's decode step
    made four times as slow in the new tree only (RLBENCH_SLOW=decode:3.0) must fail on the rollout cost,
    in the first A/B run and in the second that confirms it (fresh processes; the default --confirm).
    (A 2x decode step measured as +75% rollout cost once in CI, inside the flag line of 7 paired iterations
    of a 2-core machine (+87%): the planted change must stand far outside the noise of so short a run.)"""
    hist = tmp_path.with_name(tmp_path.name + "-history.jsonl")
    proc = rlbench("check", "--against", "HEAD", "--config", TINY, "--ablation", "none",
                   *sets("run.iterations=12", "run.warmup_iterations=1", "engine.schedule=sync"), "--out", tmp_path,
                   "--record", hist, env={"RLBENCH_SLOW": "decode:3.0"}, timeout=900)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"not recorded in {hist}" in proc.stdout and not hist.exists()  # the history keeps accepted results
    verdict = proc.stdout.split("\nFAIL")[1]
    assert "confirmed by a second A/B run" in verdict and "cost:rollout: +" in verdict
    ab, again = sorted(tmp_path.iterdir())
    record = json.loads((ab / against.AB_FILE).read_text())
    assert record["planted"] == {"RLBENCH_SLOW": "decode:3.0"} and record["verdict"]["exit_code"] == 1
    assert record["confirmed_by"] == str(again.resolve()) and "cost:rollout" in record["combined_verdict"]["worse"]
    old, new = (schema.load_run(d)[0] for d in against.run_dirs(ab))
    assert "planted_slowdown" not in old and new["planted_slowdown"] == {"decode": 3.0}
    spans = sorted((r["clock_t0"] + it["start"], r["clock_t0"] + it["end"], side, it["iteration"])
                   for side, r in (("old", old), ("new", new)) for it in r["iterations"])
    assert [(s, k) for _, _, s, k in spans] == [(s, k) for k in range(12)
                                              for s in (("old", "new") if k % 2 == 0 else ("new", "old"))]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # never two timed iterations at once


def test_the_old_side_cannot_import_a_module_only_the_new_tree_has(tmp_path):
    """The editable install's finder (setuptools) knows every module of this tree by name and comes after the
    shim on the import path: without the shim's guard, the old tree's process would quietly import this
    tree's module where the old tree has none."""
    old = tmp_path / "tree"
    for pkg in ("bench", "bench/run"):
        (old / pkg).mkdir(parents=True)
        (old / pkg / "__init__.py").write_text("")
    (old / "bench" / "run" / "only_old.py").write_text("WHERE = 'old'\n")
    against._write_shim(old, tmp_path / "shim")
    code = ("import rlbench.run.only_old as m; print(m.WHERE)\n"
            "try:\n    import rlbench.core.errors\nexcept ImportError as e:\n    print('ImportError', e.name)\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tmp_path / "shim")},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["old", "ImportError", "rlbench.core"]  # the old tree has no core package at all


def _commit(repo, message: str) -> str:
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", message], check=True)
    return subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_an_accepted_commit_that_is_not_an_ancestor_exits_2_naming_the_merge_base(tmp_path):
    """ACCEPTED names a commit of another branch (or one a rebase rewrote): the check refuses it."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    base = _commit(tmp_path, "base")
    subprocess.run(["git", "-C", str(tmp_path), "checkout", "-q", "-b", "side"], check=True)
    side = _commit(tmp_path, "on another branch")
    subprocess.run(["git", "-C", str(tmp_path), "checkout", "-q", "main"], check=True)
    (tmp_path / against.ACCEPTED).parent.mkdir(parents=True)
    (tmp_path / against.ACCEPTED).write_text(f"# accepted\n{side}\n")
    _commit(tmp_path, "this tree")
    with pytest.raises(UserError, match=f"not an ancestor .* merge base is {base[:12]}") as err:
        against.resolve("accepted", repo=tmp_path)
    assert err.value.exit_code == 2
    (tmp_path / against.ACCEPTED).write_text(f"{base}\n")  # an ancestor: accepted
    assert against.resolve("accepted", repo=tmp_path)[1] == base
    assert against.resolve(side, repo=tmp_path)[1] == side  # another REF may be any commit this clone has
