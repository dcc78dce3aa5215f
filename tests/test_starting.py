"""How a run's processes start (bench/core/devices/starting.py): forked from a fork server that has imported
torch and transformers, spawned where a process holds an NPU or RLBENCH_START=spawn says so.
The whole-run consequences (a killed `rlbench run` leaves nothing, by either method) are in
tests/test_process_hygiene.py."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlbench.core.devices import starting
from rlbench.core.errors import UserError

PROBE = Path(__file__).parent / "support" / "start_probe.py"


def test_forkserver_unless_an_npu_is_held_or_spawn_is_asked_for(monkeypatch):
    monkeypatch.delenv(starting.ENV, raising=False)
    assert (starting.method(forkable=True), starting.method(forkable=False)) == ("forkserver", "spawn")
    monkeypatch.setenv(starting.ENV, "spawn")
    assert starting.method(forkable=True) == "spawn"
    monkeypatch.setenv(starting.ENV, "forkserver")  # never for an NPU: torch_npu has not run forked
    assert starting.method(forkable=False) == "spawn"
    monkeypatch.setenv(starting.ENV, "fork")
    with pytest.raises(UserError, match="RLBENCH_START='fork': allowed are 'spawn' and 'forkserver'"):
        starting.method(forkable=True)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_process_starts_with_the_preloaded_modules_and_no_life_line(method):
    """Forked: its parent is the fork server, torch and transformers already imported, and the server's life
    line it inherited closed by `detach` (else the server outlives its client). Spawned: a child of its
    client that imports them itself."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROBE.parent.parent), starting.ENV: method}
    proc = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["method"] == method and got["exitcode"] == 0 and got["line_after_detach"] is None
    if method == "forkserver":
        assert got["server"] not in (None, got["client"]) and got["ppid"] == got["server"]
        assert got["preloaded"] and got["inherited_line"]
    else:
        assert got["server"] is None and got["ppid"] == got["client"]
        assert not got["preloaded"] and not got["inherited_line"]


@pytest.mark.parametrize("as_cell", [False, True])
def test_a_cell_forks_its_server_from_itself_and_a_fresh_client_starts_one_that_imports(as_cell):
    """`rlbench run` (nothing imported) starts a fresh interpreter as its server, which imports the preload
    list; a cell (the list imported already: it was forked from such a server) forks its server from itself,
    so the server has nothing to import. Either way the process it forks starts with the modules loaded and
    lets go of the server's life line, and the server is the client's child."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROBE.parent.parent)}
    proc = subprocess.run([sys.executable, str(PROBE), *(["--as-cell"] if as_cell else [])], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["method"] == "forkserver" and got["exitcode"] == 0 and got["ppid"] == got["server"]
    assert got["preloaded"] and got["line_after_detach"] is None and got["server_ppid"] == got["client"]
    assert got["server_is_a_fork"] is as_cell


def test_a_malformed_rlbench_start_is_refused_before_the_run_folder(tmp_path):
    """Bad input: exit 2 naming the variable and what is allowed, before anything is made."""
    from support.cli import rlbench
    from conftest import TINY

    proc = rlbench("run", "--config", TINY, "--out", tmp_path / "runs", "--ablation", "none", "--no-progress",
                   env={starting.ENV: "fork"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "RLBENCH_START='fork': allowed are 'spawn' and 'forkserver'" in proc.stderr
    assert not (tmp_path / "runs").exists()
