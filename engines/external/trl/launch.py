"""Start TRL's ranks as rlbench starts its sync ranks, and end them all when one fails or on Ctrl-C.

One process per device (a CPU core or a GPU), each created with torchrun's environment contract
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: accelerate reads it and joins a gloo group
on CPU, an NCCL group on CUDA) and one intra-op thread; each pins itself to its core when it starts
(worker.py). On a GPU a rank sees only its own device (CUDA_VISIBLE_DEVICES, as rlbench's workers:
core/devices/ device.py visible_env), so it is the rank's device 0 and LOCAL_RANK is 0 (accelerate
sets the current device from LOCAL_RANK). A rank leads its own process
group in the run's session (OWN_GROUP: ending it ends whatever it started) and carries the run's
token (core/devices/procs.py), so
`rlbench run`'s last sweep finds it whatever happened. A rank that dies ends the others at once:
they would otherwise wait in a collective until gloo's timeout.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from rlbench.core.devices import device as dev

# Quiet, offline, single-threaded: TRL's telemetry ping and the Hub are out of reach on a benchmark
# node.
RANK_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
            "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
            "PYTHONUNBUFFERED": "1"}


# Each rank leads a process group of its own (ended as one) but stays in the session of `rlbench
# run`, as rlbench's workers do: Linux's autogroup scheduler shares a core between sessions first,
# so a rank in a session of its own would get a larger share of a core other jobs also use than
# rlbench's ranks get.
OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, kind: str = "cpu", environ=None) -> dict[str, str]:
    """A rank's environment on device `kind`: torchrun's variables, and on an accelerator its one
    device visible (the device the parent sees as `rank`)."""
    visible = dev.visible_env(kind, rank, environ)
    local_rank, local_world = (0, 1) if visible else (rank, world)
    return {**RANK_ENV, **visible, "RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_world), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)}


def start_ranks(spec_path: Path, world: int, log_dir: Path, rank0_fds: tuple[int, int],
                kind: str = "cpu") -> list[subprocess.Popen]:
    """The world's rank processes on device `kind`, rank 0 holding the turn pipe's fds; output to
    log_dir/rank<r>.log."""
    port, procs = free_port(), []
    for rank in range(world):
        log = open(Path(log_dir) / f"rank{rank}.log", "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "rlbench.engines.external.trl.worker", str(spec_path),
             str(rank)],
            env={**os.environ, **rank_env(rank, world, port, kind)}, stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=rank0_fds if rank == 0 else (), **OWN_GROUP))
        log.close()  # the child holds it
    return procs


def wait_ranks(procs: list[subprocess.Popen], serve) -> list[int]:
    """Serve rank 0's turn requests (serve(timeout_s)) until every rank has ended; the first nonzero
    exit ends the others. -> the exit codes, rank order."""
    # a list: every rank polled, not only up to the first alive
    while None in [p.poll() for p in procs]:
        serve(0.2)
        if any(p.returncode not in (None, 0) for p in procs):
            stop_ranks(procs)
    return [p.returncode for p in procs]


def stop_ranks(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM to every rank's process group, SIGKILL to what is left after grace_s."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(0.1)


def log_tail(log_dir: Path, rank: int, lines: int = 15) -> str:
    path = Path(log_dir) / f"rank{rank}.log"
    text = path.read_text(errors="replace").splitlines() if path.is_file() else []
    return "\n".join(text[-lines:])
