"""rlbench as a user installs it, outside the checkout: the wheel `pip wheel .` builds holds every
package of the tree, the shipped configs and the default's warm start, and an installed rlbench runs from
any directory.

The wheel goes into a fresh venv without its dependencies; those (the pinned CPU torch among them) come
from this environment's site-packages through a .pth line, so the test needs no download. A .pth line
adds a folder but runs no .pth file inside it, so this environment's editable rlbench stays out of
reach: `import rlbench` can only find the wheel's copy (asserted)."""
from __future__ import annotations

import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.e2e


def _modules_in_tree() -> set[str]:
    """Every module of the tree under its installed name (setup.py's package-dir mapping)."""
    roots = {"bench": "rlbench", "core": "rlbench/core", "engines": "rlbench/engines",
             "analysis": "rlbench/analysis", "reports": "rlbench/reports", "configs": "rlbench/configs"}
    return {f"{prefix}/{f.relative_to(ROOT / folder).as_posix()}"
            for folder, prefix in roots.items() for f in (ROOT / folder).rglob("*.py")
            if "__pycache__" not in f.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the wheel, the bin/ of a fresh venv with it installed)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                    "-w", str(tmp / "dist")], check=True, capture_output=True, timeout=600)
    wheel = next((tmp / "dist").glob("rlbench-*.whl"))
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=120)
    py = tmp / "venv" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-compile",
                    str(wheel)], check=True, capture_output=True, timeout=600)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "deps-of-the-test-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return wheel, py.parent


def _run(bin_dir: Path, *args: str, cwd: Path, timeout: int = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_wheel_holds_every_module_and_the_shipped_configs(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = _modules_in_tree() - names
    assert not missing, sorted(missing)
    configs = {p.name for p in (ROOT / "configs").glob("*.yaml")} | {
        f"models/{p.name}" for p in (ROOT / "configs" / "models").glob("*.json")}
    assert {f"rlbench/configs/{c}" for c in configs} <= names
    shipped = {f"rlbench/engines/model/warmstart/{p.name}" for p in (ROOT / "engines/model/warmstart").iterdir()}
    assert "rlbench/engines/model/warmstart/model.safetensors" in shipped  # the default's warm start
    assert shipped <= names


def test_an_installed_rlbench_runs_a_shipped_config_from_another_directory(installed, tmp_path):
    _, bin_dir = installed
    where = _run(bin_dir, "python", "-c", "import rlbench; print(rlbench.__file__)", cwd=tmp_path)
    assert where.returncode == 0 and Path(where.stdout.strip()).is_relative_to(bin_dir.parent), where
    assert _run(bin_dir, "rlbench", "--help", cwd=tmp_path).returncode == 0
    listed = _run(bin_dir, "rlbench", "config", "--list", cwd=tmp_path)
    assert listed.returncode == 0 and {"cpu-default", "cpu-tiny"} <= {line.split()[0] for line in
                                                                       listed.stdout.splitlines()}
    run = _run(bin_dir, "rlbench", "run", "--config", "cpu-tiny", "--ablation", "none", "--no-progress",
               "--set", "run.iterations=2", "--out", "runs", cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert list((tmp_path / "runs").glob("*/sync/results.json"))
    wrong = _run(bin_dir, "rlbench", "run", "--config", "no-such-config", cwd=tmp_path)
    assert wrong.returncode == 2 and "cpu-default" in wrong.stderr
