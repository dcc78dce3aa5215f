"""Process hygiene: every process a run starts ends with it
(docs/architecture/runs-that-end-badly.md).

Three mechanisms, each a backstop for the one before:

- **Explicit shutdown.** Hosts stop their workers, workers close their backends (vLLM's engine is
  shut down by name, engines/rollout/vllm_backend.py).
- **Parent-death signal.** A worker process asks the kernel (prctl PR_SET_PDEATHSIG) to be killed
  when its parent dies, so a cell that dies hard does not leave its workers running; a cell gets
  SIGTERM when the `rlbench run` process dies and then ends its whole process group.
- **One process group per cell.** A cell process leads its own group; everything it starts (workers,
  vLLM engine cores and their workers, multiprocessing resource trackers) inherits the group unless
  it leaves it, so after the cell ends its parent kills what is left of the group and checks in
  /proc that nothing remains. (The cells' own group is also why Ctrl-C is forwarded: a terminal
  sends SIGINT to the foreground group, which holds only `rlbench run`.)

Every process of a run also carries RUN_ENV=<token> in its environment (inherited from `rlbench
run`), so a test or the soak script can find any process of a run by walking /proc, whatever its
group, instead of trusting a shutdown call. Linux only (/proc, prctl); elsewhere the helpers do
nothing.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
import time
import uuid

RUN_ENV = "RLBENCH_RUN_TOKEN"  # inherited by every process of a run: how leftovers are found
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def mark_run() -> str:
    """Give this process (and so everything it starts) a fresh run token; -> the token."""
    token = uuid.uuid4().hex
    os.environ[RUN_ENV] = token
    return token


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies. If the parent died before
    the request was made (a race at start), send it now: nobody would ever stop this process.
    (The kernel's parent is the process that forked this one: for a multiprocessing child started by
    spawn, the process that started it; by a fork server (core/devices/starting.py), the server,
    which ends when that process does.)"""
    parent, before = multiprocessing.parent_process(), os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the host's close() and the group kill remain
        return
    if os.getppid() != before or (parent is not None and not parent.is_alive()):
        os.kill(os.getpid(), sig)


def lead_own_group() -> int:
    """Make this process the leader of a new process group (its children inherit it); -> the group
    id."""
    try:
        os.setpgid(0, 0)
    except OSError:  # already a session or group leader
        pass
    return os.getpgid(0)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) of a live process from /proc/<pid>/stat, None if gone."""
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name in () may hold spaces
    return fields[0], int(fields[1]), int(fields[2])


def parent_pid(pid: int) -> int | None:
    st = _stat(pid)
    return st[1] if st else None


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Running or sleeping: a zombie (state Z) holds no memory and only waits to be reaped."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def group_members(pgid: int, spare: int | None = None) -> list[int]:
    """Live processes of process group `pgid` (found in /proc), except `spare`."""
    return [p for p in _pids() if p != spare and (st := _stat(p)) and st[2] == pgid and st[0]
            not in "ZX"]


def marked(token: str, spare: tuple[int, ...] = (), var: str = RUN_ENV) -> list[int]:
    """Live processes whose environment carries var=token (this user's processes only). Tests and
    the soak script set a variable of their own and find every process of the runs they start with
    it."""
    needle = f"{var}={token}".encode()
    out = []
    for pid in _pids():
        if pid in spare:
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:  # gone, or another user's
            continue
        if needle in env.split(b"\0") and _alive(pid):
            out.append(pid)
    return out


def describe(pids: list[int]) -> list[str]:
    """'pid command line' of each process (for messages and the soak report)."""
    out = []
    for pid in pids:
        try:
            cmd = open(f"/proc/{pid}/cmdline",
                       "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "(gone)"
        out.append(f"{pid} {cmd[:120]}")
    return out


def kill_all(pids_of, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process pids_of() lists, again until none is left or timeout_s passed;
    -> the processes still alive then (an empty list is the normal outcome)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = pids_of()
        if not left or time.monotonic() > deadline:
            return left
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def end_group(pgid: int, grace_s: float = 2.0, timeout_s: float = 10.0) -> list[int]:
    """What is left of a process group after its leader ended: a moment to exit by itself (a
    resource tracker cleans up once its last user is gone), then SIGKILL; -> survivors after
    timeout_s."""
    deadline = time.monotonic() + grace_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return kill_group(pgid, timeout_s=timeout_s - grace_s)


def kill_group(pgid: int, spare: int | None = None, timeout_s: float = 10.0) -> list[int]:
    """Kill what is left of process group `pgid` (except `spare`); -> survivors after timeout_s."""
    return kill_all(lambda: group_members(pgid, spare), timeout_s)


def interruptible() -> None:
    """SIGINT raises KeyboardInterrupt in this process even if it was started with SIGINT ignored (a
    background job of a non-interactive shell inherits that): the stops forwarded inside a run
    (Ctrl-C passed on to a cell's group, a dead parent's SIGTERM) are SIGINTs and must not be
    ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


# the polite stop's time limit; then the group is killed (see stop_group_on_sigterm)
HARD_STOP_S = 6.0


def stop_group_on_sigterm(hard_stop_s: float = HARD_STOP_S) -> None:
    """SIGTERM to this process (a group leader) becomes SIGINT to its whole group: the same stop as
    a Ctrl-C, so workers and the cell end the way they end on Ctrl-C, with the results saved. Once
    only: the parent-death signal comes once per thread of the dead parent (measured: twice, 0.1 s
    apart, when `rlbench run` was killed), and a second interrupt would cut the saving short.

    A group still alive hard_stop_s later is killed (SIGKILL): on a loaded machine the polite stop
    of a cell whose `rlbench run` was killed once took over 10 s (scripts/soak.py), and nothing of a
    run may outlive it by more than 10 s. Every finished iteration is on disk by then (results.json
    is saved after each one); only the cell's final status can be lost. The kill is a separate
    process's (`sleep; kill` outside the group), not a thread's of this one: a thread waits for the
    interpreter's lock, which a long call in C holds, and a run killed on a machine with a load of
    13 left its cell and resource tracker alive past 10 s."""
    def stop(*_) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pgid = os.getpgid(0)
        # The watchdog first: the SIGINT below reaches this process too and raises KeyboardInterrupt
        # here.
        hard_stop(pgid, hard_stop_s)
        forward(signal.SIGINT, pgid)

    signal.signal(signal.SIGTERM, stop)


def hard_stop(pgid: int, after_s: float) -> None:
    """SIGKILL to the process group pgid after_s seconds from now, by a process of its own outside
    the group (so the group's SIGINT and kill do not reach it first); it ends right after."""
    import subprocess  # inside: only a stopping process starts it

    try:
        subprocess.Popen(["/bin/sh", "-c", f"sleep {after_s:g}; kill -KILL -{pgid} 2>/dev/null"],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    except OSError:  # no shell to start (out of processes?): a thread of this one, the best left
        timer = threading.Timer(after_s, forward, (signal.SIGKILL, pgid))
        timer.daemon = True
        timer.start()


def forward(sig: int, pgid: int) -> None:
    """Send `sig` to a process group that may already be gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
