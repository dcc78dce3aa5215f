"""A warm interpreter for the tests' `rlbench` commands: one process per pytest process that has imported
what every `rlbench run` imports (torch, transformers, the fork server's preload list, the CLI, pandas and
matplotlib for the table and report) and computed nothing; each command runs in a fork of it.

A fresh `rlbench run` of the tiny config spends ~11 of its ~15 CPU-s importing: its own process (~2 s)
and its fork server (~8 s, core/devices/starting.py). A fork of this process has them already,
and its run's fork server is a fork of it too (`starting.warm`: a process that has the preload list and
no thread besides its own), as a cell's is. The command is the same code from `rlbench.cli.main` on, with
the arguments, environment, working directory and standard streams it would have in a fresh
interpreter, and it exits as one does (atexit handlers, non-daemon threads joined).

What a fork cannot show, and so a fresh interpreter runs instead (support/cli.py decides):
- an environment that differs from this process's own in anything but the RLBENCH_* variables: others
  (OMP_*, PYTHONPATH, ...) are read when the interpreter or a library starts;
- what the command's own interpreter imports (tests/unit/core/test_limits.py), or
- the run's processes found by their environment: /proc/PID/environ is a process's environment as it was
  when it was exec'd, and a fork's is this process's, without the run token (tests of process hygiene
  start their runs fresh, as do the tests of the command's own imports).
tests/meta/test_warm_cli.py holds a warm run equal to a fresh one.
"""
from __future__ import annotations

import atexit
import ctypes
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What every `rlbench run` imports, in its own process or its fork server; importing them computes nothing
IMPORTS = ("rlbench.cli", "rlbench.run.ablation", "rlbench.reports", "rlbench.run.around", "pandas",
           "matplotlib.pyplot", "scipy.special")
TESTS = Path(__file__).resolve().parent.parent
IGNORED = ("PYTEST_CURRENT_TEST",)  # pytest's own, set per test; no command reads it
MAX_MESSAGE = 1 << 20
START_S = 300  # its imports take ~10 s on 2 idle cores; far longer means something is wrong


def inherited() -> dict:
    """This process's environment as a command inherits it: without PYTEST_CURRENT_TEST and without the
    OpenMP and MKL settings that rlbench's own code, run in-process by earlier tests, leaves in it
    (core/devices/device.py sets OMP_NUM_THREADS, bench/run/ablation.py OMP_WAIT_POLICY), nor the
    inductor settings torch.compile leaves (TORCHINDUCTOR_CACHE_DIR, _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR:
    tests/unit/engines/test_compile.py compiles in-process; a command that compiles sets its own)."""
    return {k: v for k, v in os.environ.items() if k not in IGNORED
            and not k.startswith(("OMP_", "MKL_", "TORCHINDUCTOR_", "_TORCHINDUCTOR_"))}


def same_start(env: dict, started: dict) -> bool:
    """Whether a command with environment `env` may run in a fork of an interpreter started with `started`:
    they differ in RLBENCH_* variables only (read by the command when it runs, never at import)."""
    keys = (set(env) | set(started)) - set(IGNORED)
    return all(k.startswith("RLBENCH_") for k in keys if env.get(k) != started.get(k))


# ------------------------------------------------------------------ the warm interpreter (its own process)


def serve(fd: int) -> None:
    """The warm interpreter's loop on the socket `fd`: a request (argv, env, cwd; stdout's and stderr's
    descriptors) -> a forked command; answers its pid, then its exit status. Ends when the socket closes
    (its pytest process is done) or that process dies."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: the pytest process died
    from rlbench.core.devices.starting import PRELOAD

    for name in (*PRELOAD, *IMPORTS):
        importlib.import_module(name)
    assert threading.active_count() == 1, threading.enumerate()  # a fork must start with one thread
    conn = socket.socket(fileno=fd)
    conn.sendall(b"ready")
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 2)
        except ConnectionError:
            return
        if not message:
            return
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _command(request, *fds)
        for f in fds:
            os.close(f)
        _send(conn, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})


def _send(conn: socket.socket, answer: dict) -> None:
    try:
        conn.sendall(json.dumps(answer).encode())
    except OSError:  # the client gave up (its test timed out or ended): nothing to tell
        pass


def _command(request: dict, out: int, err: int) -> None:
    """In the fork: the command as a fresh interpreter would run it, then exit with its code."""
    os.dup2(out, 1)
    os.dup2(err, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for f in (out, err, null):
        os.close(f)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["rlbench", *request["args"]]
    code = 1
    try:
        from rlbench.cli import main

        if request["prelude"]:
            exec(request["prelude"], {"sys": sys})  # noqa: S102 - a test's own line, as `python -c` would run it
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # an uncaught exception: its traceback, exit code 1, as a fresh interpreter's
        import traceback

        traceback.print_exc()
    finally:
        try:
            threading._shutdown()  # noqa: SLF001 - what the interpreter's exit does: wait for non-daemon threads
            atexit._run_exitfuncs()  # noqa: SLF001 - and run atexit's functions (multiprocessing's among them)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# ------------------------------------------------------------------ the client (in the pytest process)


class Warm:
    """This pytest process's warm interpreter, started at its first command."""

    def __init__(self):
        self.started = inherited()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); from support.warm import serve; serve({theirs.fileno()})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()], env=self.started,
                                     cwd=TESTS.parent, stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = ours
        self.lock = threading.Lock()
        self.conn.settimeout(START_S)
        try:
            started = self.conn.recv(16) == b"ready"
        except TimeoutError:
            started = False
            self.proc.kill()
        if not started:
            raise RuntimeError(f"the warm interpreter did not start (exit code {self.proc.wait()})")
        atexit.register(self.close)

    def run(self, args: list[str], env: dict, timeout: float, prelude: str | None = None
            ) -> subprocess.CompletedProcess | None:
        """`rlbench ARGS` in a fork, to its end (prelude: Python run first there); None where this one cannot
        run it (env, or busy)."""
        if not same_start(env, self.started) or not self.lock.acquire(blocking=False):
            return None
        try:
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                request = {"args": list(map(str, args)), "env": {k: os.fspath(v) for k, v in env.items()},
                           "cwd": os.getcwd(), "prelude": prelude}
                socket.send_fds(self.conn, [json.dumps(request).encode()], [out.fileno(), err.fileno()])
                pid = self._answer(None)["pid"]
                try:
                    code = self._answer(timeout)["returncode"]
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    self._answer(None)
                    raise subprocess.TimeoutExpired(["rlbench", *args], timeout, _text(out), _text(err)) from None
                return subprocess.CompletedProcess(["rlbench", *args], code, _text(out), _text(err))
        finally:
            self.lock.release()

    def _answer(self, timeout: float | None) -> dict:
        self.conn.settimeout(timeout)
        message = self.conn.recv(MAX_MESSAGE)
        if not message:
            raise RuntimeError(f"the warm interpreter ended (exit code {self.proc.wait()})")
        return json.loads(message)

    def close(self) -> None:
        self.conn.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _text(f) -> str:
    """What a command wrote to the file, as subprocess's text mode reads it (universal newlines)."""
    f.seek(0)
    return f.read().decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


_WARM: Warm | None = None


def warm() -> Warm:
    """This pytest process's warm interpreter (started on the first call, with this process's environment
    as it is then; it ends with this process)."""
    global _WARM
    if _WARM is None:
        _WARM = Warm()
    return _WARM
