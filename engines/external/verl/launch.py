"""Start VERL's driver, watch it, and end every process it started, whatever happens.

VERL's driver starts a Ray instance (GCS, raylet, dashboard, workers) whose processes leave its
process group, so they are found instead by a token in their environment (VERL_TOKEN: Ray's
processes inherit the driver's environment, and its workers the raylet's), as rlbench finds its own
(core/devices/procs.py). The driver and everything under it run on the run's cores (CPU affinity is
inherited).

The watchdog: a run that prints nothing and logs no step for `hang_s` seconds is hung (a VERL job
whose vLLM worker died waits forever): it is ended, and the run fails (exit 3) with VERL's last
lines.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path

from rlbench.core.devices import procs
from rlbench.core.record.stages import now

VERL_TOKEN = "RLBENCH_VERL_TOKEN"


class VerlProcess:
    """One VERL driver and the processes it starts; its output, line by line, to `log` (and stderr
    if echo), each line's arrival time kept for the start-up's phases."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str], cwd: Path,
                 cores: list[int] | None,
                 echo: bool = False, token: str | None = None):
        self.token = token or new_token()
        # short: Ray's socket paths must fit 107 bytes
        self.ray_dir = Path(f"/tmp/rlb-{self.token[:10]}")
        # removed with the run (stop)
        argv = [*argv, f"+ray_kwargs.ray_init._temp_dir={self.ray_dir}"]
        self.lines: deque[str] = deque(maxlen=60)
        self.first_seen: dict[str, float] = {}  # marker -> when the first line holding it arrived
        self.last_output = now()
        self._log = open(log, "w", buffering=1)
        self._echo = echo
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
            start_new_session=True,
            env={**os.environ, **env, VERL_TOKEN: self.token}, preexec_fn=_pin(cores))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def watch_for(self, markers: dict[str, str]) -> None:
        """Note when the first line containing each marker text arrives (name -> text)."""
        self._markers = markers

    _markers: dict[str, str] = {}

    def _read(self) -> None:
        for line in self.proc.stdout:
            t = now()
            self.last_output = t
            self._log.write(line)
            self.lines.append(line.rstrip("\n"))
            if self._echo:
                sys.stderr.write(line)
            for name, text in self._markers.items():
                if name not in self.first_seen and text in line:
                    self.first_seen[name] = t
        self._log.close()

    def poll(self) -> int | None:
        return self.proc.poll()

    def tail(self, n: int = 25) -> str:
        return "\n".join(list(self.lines)[-n:])

    def stop(self, grace_s: float = 10.0) -> list[int]:
        """SIGINT to the driver's group (VERL's driver then shuts Ray down), SIGKILL to whatever of
        the run is left after grace_s, Ray's files removed. -> processes still alive (normally
        none)."""
        if self.proc.poll() is None:
            procs.forward(signal.SIGINT, self.proc.pid)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        left = procs.kill_all(lambda: pids(self.token), timeout_s=10.0)
        procs.kill_group(self.proc.pid, timeout_s=5.0)
        self.proc.wait()
        self._reader.join(timeout=5.0)
        shutil.rmtree(self.ray_dir, ignore_errors=True)
        return left


def new_token() -> str:
    """A fresh token for one VERL run (VERL_TOKEN in the environment of every process it starts)."""
    return uuid.uuid4().hex


def pids(token: str) -> list[int]:
    """Every live process of the VERL run with this token."""
    return procs.marked(token, var=VERL_TOKEN)


def _pin(cores: list[int] | None):
    """preexec_fn: the driver (and so every process under it) on the run's cores."""
    if not cores:
        return None
    return lambda: os.sched_setaffinity(0, set(cores))


def wait(run: VerlProcess, progress, hang_s, tick) -> int | None:
    """Until the driver exits (-> its code) or is hung (-> None). progress() -> the steps logged so
    far, a change in it counts as a sign of life; hang_s() -> the watchdog's current limit;
    tick(timeout_s) -> True when the time went to something other than VERL's own work (waiting for
    the cell's turn), which restarts the count."""
    seen, alive_at = progress(), now()
    while run.poll() is None:
        if tick(0.5):
            alive_at = now()
        steps = progress()
        if steps != seen:
            seen, alive_at = steps, now()
        if now() - max(alive_at, run.last_output) > hang_s():
            return None
    return run.proc.returncode
