"""`rlbench check --env-a PYTHON --env-b PYTHON` and `--set-b` (bench/check/envs.py, env_ab.py): each side's
interpreter asked what it holds, bad input refused with exit 2 naming the side and what, the packages that
differ named beside the stages that moved, the history naming an environment by its packages, and the
planted environment (bench/planted/slow_op.py) slowing the one operator it names."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support.cli import rlbench

from rlbench.check import envs, history, history_text
from rlbench.check.confirm import format_confirmed
from rlbench.check.env_ab import Sides, _cmd, _environ
from rlbench.check.verdicts import CheckResult, Row, format_check
from rlbench.core.errors import UserError
from rlbench.planted import slow_op
from rlbench.run import around, interleave


def _wrapper(tmp_path: Path, name: str, body: str) -> Path:
    """An executable wrapper script (as a user's CI may name one instead of a venv's python)."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _fake_rlbench(tmp_path: Path, schema_version: int, protocol: int) -> Path:
    """A package `rlbench` that answers the probe with another schema or protocol, and nothing else."""
    root = tmp_path / f"fake-{schema_version}-{protocol}"
    for pkg in ("rlbench", "rlbench/core", "rlbench/core/results", "rlbench/run"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "rlbench/core/results/schema.py").write_text(f"SCHEMA_VERSION = {schema_version}\n")
    (root / "rlbench/run/interleave.py").write_text(f"PROTOCOL = {protocol}\n")
    # -S: no site-packages, so this rlbench and not the installed one is found
    return _wrapper(tmp_path, f"python-{schema_version}-{protocol}", f'PYTHONPATH={root} exec {sys.executable} -S "$@"')


def test_this_interpreter_is_probed_with_its_packages_and_rlbench():
    env = envs.probe("B", sys.executable)
    assert env.schema_version == 1 and env.protocol == interleave.PROTOCOL and "engine_turns" in env.features
    assert env.packages["torch"].startswith("2.") and env.packages["rlbench"] and env.is_venv
    assert Path(env.rlbench_path, "check", "envs.py").is_file()


def test_an_interpreter_that_does_not_exist_exits_2_naming_the_side(tmp_path):
    proc = rlbench("check", "--env-a", tmp_path / "nope" / "python", "--out", tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--env-a" in proc.stderr and "environment A's interpreter does not exist" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing ran, no A/B folder


@pytest.mark.parametrize("side, which, said", [
    ("a", "bare", "environment A has no rlbench: install rlbench there"),
    ("b", "schema", "environment B: its rlbench (.*) writes result schema 99, this rlbench reads schema 1"),
])
def test_the_command_exits_2_naming_the_side_and_what(tmp_path, side, which, said):
    python = (_wrapper(tmp_path, "bare", f'exec {sys.executable} -S "$@"') if which == "bare"
              else _fake_rlbench(tmp_path, 99, interleave.PROTOCOL))
    out = tmp_path / "out"
    proc = rlbench("check", f"--env-{side}", python, "--out", out)
    assert proc.returncode == 2, proc.stderr
    assert re.search(f"--env-{side} {re.escape(str(python))}: {said}", proc.stderr), proc.stderr
    assert not out.exists()  # refused before anything ran


def test_a_program_that_is_not_python_is_refused(tmp_path):
    with pytest.raises(UserError, match="environment B's interpreter did not run as Python"):
        envs.probe("B", str(_wrapper(tmp_path, "notpython", "echo hello")))


def test_an_interpreter_without_rlbench_is_refused_naming_the_side(tmp_path):
    bare = _wrapper(tmp_path, "bare", f'exec {sys.executable} -S "$@"')
    with pytest.raises(UserError, match=r"--env-b .*bare: environment B has no rlbench: install rlbench there"):
        envs.probe("B", str(bare))


def test_an_rlbench_whose_result_schema_differs_is_refused(tmp_path):
    with pytest.raises(UserError, match="environment A: its rlbench .* writes result schema 99, this rlbench reads "
                                        "schema 1"):
        envs.probe("A", str(_fake_rlbench(tmp_path, 99, interleave.PROTOCOL)))
    with pytest.raises(UserError, match="environment B: .* takes turns by ring protocol 1, this rlbench by"):
        envs.probe("B", str(_fake_rlbench(tmp_path, 1, 1)))


def test_an_rlbench_that_predates_engine_turns_is_refused_for_a_peer_engine(tmp_path):
    old = envs.probe("A", str(_fake_rlbench(tmp_path, 1, interleave.PROTOCOL)))  # no rlbench.check.envs there
    assert old.features == []
    with pytest.raises(UserError, match="environment A's rlbench .* predates taking turns"):
        envs.require(old, "engine_turns", "taking turns as a side of `rlbench check --engine trl`")


@pytest.mark.parametrize("args, said", [
    (["--against", "HEAD", "--set-b", "rollout.max_num_seqs=8"], "one A/B at a time"),
    (["--engine", "trl"], "an A/B of two environments or configs only"),
    (["--set-b", "run.iterations=4", "--record", "h.jsonl", "--anchor-every", "2"], "--anchor-every"),
    (["--env-a", sys.executable, "--engine", "mindspeed-rl"], "MindSpeed-RL's cells do not take turns"),
])
def test_conflicting_options_exit_2_before_anything_runs(tmp_path, args, said):
    proc = rlbench("check", *args, "--out", tmp_path / "out")
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_run_folder_with_env_options_is_refused(tmp_path):
    proc = rlbench("check", tmp_path, "--env-a", sys.executable)
    assert proc.returncode == 2 and "give no RUN_DIRS" in proc.stderr


def test_the_packages_that_differ_are_named_a_to_b():
    a = {"torch": "2.13.0", "transformers": "5.19.0", "ray": "2.60.0"}
    b = {"torch": "2.13.0", "transformers": "5.25.0", "sitecustomize.py": "ab12 at /x"}
    diff = envs.package_diff(a, b)
    assert diff == [("ray", "2.60.0", None), ("sitecustomize.py", None, "ab12 at /x"),
                    ("transformers", "5.19.0", "5.25.0")]
    assert envs.format_diff(diff, limit=2) == "ray 2.60.0 -> absent; sitecustomize.py absent -> ab12 at /x; and 1 more"
    assert envs.fingerprint(a, []) != envs.fingerprint(b, []) != envs.fingerprint(b, ["x=1"])
    assert envs.fingerprint(a, []) == envs.fingerprint(dict(reversed(a.items())), [])
    assert envs.fingerprint(b, []) == envs.fingerprint({**b, "sitecustomize.py": "ab12 at /elsewhere"}, [])


def _result(rows: list[Row]) -> CheckResult:
    return CheckResult("runs/x", "environment A (/a/python)", rows, "PASS", 0, {"kind": "A/B"})


def test_the_report_opens_with_what_differs_beside_the_stages_that_moved():
    record = {"mode": "env", "envs": {"A": {"python": "/a/python", "version": "3.11.7"},
                                      "B": {"python": "/b/python", "version": "3.11.7"}},
              "differ": [["transformers", "5.19.0", "5.25.0"]], "sets_b": ["rollout.max_num_seqs=8"]}
    rows = [Row("cost:update", "cost", 1.0, 1.3, "worse", change=0.3, ci=(0.2, 0.4)),
            Row("cost:rollout", "cost", 1.0, 1.01, "not significant", change=0.01, ci=(-0.02, 0.04)),
            Row("cost:optimizer_step", "cost", 1.0, 0.8, "better", change=-0.2, ci=(-0.25, -0.15)),
            Row("tpspd:sync", "ratio", 1.0, 0.9, "worse", change=-0.1, ci=(-0.12, -0.08))]
    res = _result(rows)
    res.baseline_info["head"] = envs.head_lines(record, rows)
    lines = format_check(res).splitlines()
    assert lines[0] == "A/B of two environments: A = /a/python (Python 3.11.7); B = /b/python (Python 3.11.7)"
    assert lines[1] == "packages that differ (A -> B): transformers 5.19.0 -> 5.25.0"
    assert lines[2] == "config of B only: --set-b rollout.max_num_seqs=8"
    assert lines[3] == ("stages that moved (B / A): update +30.0% [+20.0%, +40.0%] worse; "
                        "optimizer_step -20.0% [-25.0%, -15.0%] better")
    assert lines[4] == "other metrics that moved: tpspd:sync -10.0% [-12.0%, -8.0%] worse"
    assert lines[5].startswith("rlbench check: runs/x against environment A")
    quiet = envs.head_lines({**record, "differ": [], "sets_b": []}, rows[1:2])
    assert quiet[1:] == ["packages that differ: none (the same versions on both sides)",
                         "stages that moved (B / A): none beyond their floors"]


def test_a_confirmed_report_opens_once_with_what_differs():
    record = {"mode": "env", "envs": {"A": {"python": "/a/python", "version": "3.11.7"}},
              "differ": [["transformers", "5.19.0", "5.25.0"]]}
    rows = [Row("cost:update", "cost", 1.0, 1.3, "worse", change=0.3, ci=(0.2, 0.4))]
    first, second, final = _result(rows), _result(rows), _result(rows)
    for res in (first, second, final):
        res.baseline_info["head"] = envs.head_lines(record, rows)
    text = format_confirmed(first, second, final).splitlines()
    assert text[:3] == final.baseline_info["head"]
    assert sum(line.startswith("A/B of two environments") for line in text) == 1  # not once per run
    assert sum(line.startswith("rlbench check: runs/x") for line in text) == 2  # both runs' tables


def test_the_history_names_an_env_workload_apart_from_the_commit_ab():
    base = {"config": "configs/ci-ab.yaml", "ablation": "ci", "sets": []}
    env = {**base, "mode": "env", "engine": "trl", "ablation": None, "sets_b": ["a=1"]}
    assert history.workload(base) == {"config": "configs/ci-ab.yaml", "ablation": "ci", "sets": []}
    wl = history.workload(env)
    assert wl["mode"] == "env" and wl["engine"] == "trl" and wl["sets_b"] == ["a=1"] and wl != history.workload(base)
    assert history_text.title(wl) == "configs/ci-ab.yaml --engine trl --set-b a=1 (environments A/B)"
    assert history_text.title(history.workload(base)) == "configs/ci-ab.yaml --ablation ci"


def test_each_side_runs_its_own_interpreter_and_the_planted_changes_reach_b_only(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_SLOW", "update:0.1")
    a = envs.Env("A", sys.executable, prefix="/venvs/a", base_prefix="/usr")
    ring = interleave.Ring.create(tmp_path / "ring", sides=2)
    cmd = _cmd(a, Path("/c.yaml"), "ci", "trl", ["run.iterations=4"], tmp_path / "old")
    assert cmd[:3] == [sys.executable, "-m", "rlbench.cli"] and cmd[cmd.index("--engine") + 1] == "trl"
    assert "--ablation" not in cmd and cmd[-2:] == ["--set", "run.iterations=4"]
    env_a, env_b = _environ(a, ring, 0), _environ(a, ring, 1)
    assert "RLBENCH_SLOW" not in env_a and env_b["RLBENCH_SLOW"] == "update:0.1"
    assert env_a["VIRTUAL_ENV"] == "/venvs/a" and env_a["PATH"].startswith("/venvs/a/bin")
    assert env_a[interleave.ENV] == f"{ring.folder}:0" and env_b[interleave.ENV] == f"{ring.folder}:1"
    assert Sides(env_a="x").mode == "env" and Sides(sets_b=["a=1"]).mode == "config" and Sides().mode is None


def test_a_peer_engine_run_takes_a_seat_in_the_check_s_ring(tmp_path, monkeypatch):
    monkeypatch.delenv(interleave.ENV, raising=False)
    assert around.ring_pacer("trl", True) is None  # no check around it: it runs alone
    ring = interleave.Ring.create(tmp_path / "ring", sides=2)
    monkeypatch.setenv(interleave.ENV, f"{ring.folder}:1")
    pacer = around.ring_pacer("trl", True)
    state = json.loads((ring.folder / interleave.STATE).read_text())
    assert pacer.seat.id == "s1c0" and state["seats"]["s1c0"]["name"] == "trl" and state["registered"] == [1]
    with pytest.raises(UserError, match="cannot take turns"):
        around.ring_pacer("mindspeed-rl", False)


def _layered_venv(tmp_path: Path, name: str) -> Path:
    """A real venv (its own prefix and site-packages) whose packages are this test's environment's."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / name)], check=True)
    python = tmp_path / name / "bin" / "python"
    site = slow_op.site_packages(str(python))
    (site / "_base.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return python


def test_a_planted_environment_slows_its_operator_and_shows_in_the_packages(tmp_path):
    plain, planted = _layered_venv(tmp_path, "a"), _layered_venv(tmp_path, "b")
    path = slow_op.plant(str(planted), "torch.log_softmax", 1.0)
    with pytest.raises(ValueError, match="exists already"):
        slow_op.plant(str(planted), "torch.log_softmax", 1.0)
    a, b = envs.probe_both(str(plain), str(planted))
    assert a.is_venv and a.prefix != b.prefix
    (name, was, now), = envs.package_diff(a.packages, b.packages)
    assert name == "sitecustomize.py" and was is None and now.endswith(f" at {path}")
    code = ("import time, torch; torch.set_num_threads(1); x = torch.randn(64, 512); raw = torch._C._VariableFunctions"
            ".log_softmax\ndef cpu(f):\n    t = time.thread_time()\n    for _ in range(300): f(x, -1)\n"
            "    return time.thread_time() - t\ncpu(raw); cpu(torch.log_softmax)\n"
            "print(min(cpu(torch.log_softmax) / cpu(raw) for _ in range(5)))")
    ratio = float(subprocess.run([str(planted), "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 1.6 < ratio < 2.6  # 100% more CPU time per call (the wrapper's own call adds a little)
    untouched = subprocess.run([str(plain), "-c", "import torch; print(torch.log_softmax.__module__)"],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert untouched == "torch"
