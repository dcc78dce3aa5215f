"""How a run's processes start (core/devices/starting.py): forked from a fork server that has imported
torch and transformers, spawned where a process holds an NPU or RLBENCH_START=spawn says so.
The whole-run consequences (a killed `rlbench run` leaves nothing, by either method) are in
tests/e2e/test_process_hygiene.py."""
import json
import subprocess
import sys

import pytest

from conftest import TESTS

from rlbench.core.devices import starting
from rlbench.core.errors import UserError

PROBE = TESTS / "support" / "start_probe.py"


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


def run_probe(*args: str, env: dict | None = None) -> dict:
    """tests/support/start_probe.py in a fresh interpreter (nothing imported) -> what its process found."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROBE.parent.parent), **(env or {})}
    proc = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fresh_client():
    """The probe as `rlbench run` starts processes on CPU (RLBENCH_START unset): read by two tests below."""
    return run_probe()


def test_a_process_starts_with_the_preloaded_modules_and_no_life_line(fresh_client):
    """Forked (the default on CPU): its parent is the fork server, torch and transformers already imported,
    and the server's life line it inherited closed by `detach` (else the server outlives its client)."""
    got = fresh_client
    assert got["method"] == "forkserver" and got["exitcode"] == 0 and got["line_after_detach"] is None
    assert got["server"] not in (None, got["client"]) and got["ppid"] == got["server"]
    assert got["preloaded"] and got["inherited_line"]


def test_a_spawned_process_imports_them_itself():
    """RLBENCH_START=spawn: a child of its client that imports them itself."""
    got = run_probe(env={starting.ENV: "spawn"})
    assert got["method"] == "spawn" and got["exitcode"] == 0 and got["line_after_detach"] is None
    assert got["server"] is None and got["ppid"] == got["client"]
    assert not got["preloaded"] and not got["inherited_line"]


def test_a_fresh_client_starts_a_server_that_imports(fresh_client):
    """`rlbench run` (nothing imported) starts a fresh interpreter as its server, which imports the preload
    list; the server is the client's child."""
    got = fresh_client
    assert got["method"] == "forkserver" and got["exitcode"] == 0 and got["ppid"] == got["server"]
    assert got["preloaded"] and got["line_after_detach"] is None and got["server_ppid"] == got["client"]
    assert got["server_is_a_fork"] is False


def test_a_cell_forks_its_server_from_itself():
    """A cell (the list imported already: it was forked from such a server) forks its server from itself, so
    the server has nothing to import; the process it forks starts with the modules loaded and lets go of
    the server's life line, and the server is the client's child."""
    got = run_probe("--as-cell")
    assert got["method"] == "forkserver" and got["exitcode"] == 0 and got["ppid"] == got["server"]
    assert got["preloaded"] and got["line_after_detach"] is None and got["server_ppid"] == got["client"]
    assert got["server_is_a_fork"] is True


def test_a_malformed_rlbench_start_is_refused_before_the_run_folder(tmp_path):
    """Bad input: exit 2 naming the variable and what is allowed, before anything is made."""
    from support.cli import rlbench
    from conftest import TINY

    proc = rlbench("run", "--config", TINY, "--out", tmp_path / "runs", "--ablation", "none", "--no-progress",
                   env={starting.ENV: "fork"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "RLBENCH_START='fork': allowed are 'spawn' and 'forkserver'" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_the_fork_servers_preload_builds_every_config_validator():
    """A process forked from a fork server finds every config section's and options model's validator built
    (core/validators.py, last in PRELOAD), so no cell process builds them again: a model that a new
    module adds and the preload does not reach fails here."""
    code = ("import importlib, json; from rlbench.core.devices.starting import PRELOAD\n"
            "[importlib.import_module(m) for m in PRELOAD]\n"
            "from rlbench.core import config, components\n"
            "seen, todo = [], [*config.Section.__subclasses__(), *components.Options.__subclasses__()]\n"
            "while todo: m = todo.pop(); seen.append(m); todo.extend(m.__subclasses__())\n"
            "print(json.dumps([m.__name__ for m in seen if type(m.__pydantic_validator__).__name__ == 'MockValSer'"
            " or not m.__pydantic_complete__] + [len(seen)]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *unbuilt, count = json.loads(proc.stdout.strip().splitlines()[-1])
    assert unbuilt == [] and count >= 16  # the sections and options of today, and none left deferred
