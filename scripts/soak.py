"""Soak test of process hygiene (not part of the test suite): back-to-back short `rlbench run`s ending
every way a run ends, and after each, what it left behind.

    .venv/bin/python scripts/soak.py                 # 20 runs on configs/cpu-tiny.yaml
    nice -n 19 .venv/bin/python scripts/soak.py --runs 6 --out /tmp/soak

Endings, in turn: complete; Ctrl-C (SIGINT to the run's process group, as a terminal sends it); SIGKILL
of `rlbench run` itself; SIGKILL of one worker process; a worker that crashes (RLBENCH_FAULT
trainer_exit); a worker that hangs (RLBENCH_FAULT rollout_hang, caught by the hang watchdog). The
schedule alternates between sync and periodic_async. For every run it reports:

- leftover: processes of the run still alive 10 s after it ended (found in /proc by a variable only
  that run inherits, core/devices/procs.py), which must be 0;
- shm: growth of /dev/shm (shared memory a run did not release);
- lost: iterations appended to iterations.jsonl (measured) but missing from results.json;
and at the end the machine's available memory before and after (a shared machine's number: other work
moves it too). Prints a Markdown table; exit 1 if any run left a process or lost an iteration.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "RLBENCH_SOAK_MARK"
ENDINGS = ["complete", "ctrl_c", "kill_run", "kill_worker", "crash", "hang"]
EXPECTED_EXIT = {"complete": 0, "ctrl_c": 130, "kill_run": -9, "kill_worker": 3, "crash": 3, "hang": 3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--config", default=str(ROOT / "configs" / "cpu-tiny.yaml"))
    ap.add_argument("--out", default="/tmp/rlbench-soak")
    args = ap.parse_args()
    from rlbench.core.devices import device

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mem_before = device.memory_capacity("cpu")
    rows = []
    for i in range(args.runs):
        ending = ENDINGS[i % len(ENDINGS)]
        schedule = ("sync", "periodic_async")[(i + i // len(ENDINGS)) % 2]  # each ending under both, in turn
        rows.append(one_run(i, ending, schedule, args.config, out / f"{i:02d}-{ending}"))
        print(row_text(rows[-1]), file=sys.stderr, flush=True)
    time.sleep(10)
    mem_after = device.memory_capacity("cpu")
    print(table(rows, mem_before, mem_after))
    bad = [r for r in rows if r["leftover"] or r["lost"] or r["exit"] != EXPECTED_EXIT[r["ending"]]]
    return 1 if bad else 0


def one_run(i: int, ending: str, schedule: str, config: str, folder: Path) -> dict:
    """Start one run, end it as `ending` says, and measure what it left."""
    from rlbench.core.devices import procs

    mark = uuid.uuid4().hex
    sets = [f"engine.schedule={schedule}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLBENCH_FAULT", "RLBENCH_SLOW"))}
    env[MARK] = mark
    if ending in ("ctrl_c", "kill_run", "kill_worker"):
        sets.append("run.iterations=100000")
    if ending == "crash":
        env["RLBENCH_FAULT"] = "trainer_exit:2"
    if ending == "hang":
        env["RLBENCH_FAULT"] = "rollout_hang:2"
        sets.append("engine.hang_timeout_s=5")
    shm_before = shm_bytes()
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "rlbench.cli", "run", "--config", config, "--out", str(folder), "--ablation",
           "none", "--no-progress", "--no-report", *[a for s in sets for a in ("--set", s)]]
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "stderr.txt"  # a file, not a pipe: a leftover process holding a pipe would stall the soak
    with open(log, "w") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, start_new_session=True, env=env,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a terminal's job
    if ending in ("ctrl_c", "kill_run", "kill_worker"):
        _wait_iterations(folder, proc, 2)
        _end(ending, proc, mark)
    proc.wait(timeout=900)
    ended = time.monotonic()  # `rlbench run` exited (or was killed): the run's end
    err = log.read_text()
    deadline = ended + 10
    while (left := procs.marked(mark, var=MARK)) and time.monotonic() < deadline:
        time.sleep(0.2)
    gone_s = time.monotonic() - ended
    if left:  # report them, then end them so the next run starts clean
        described = procs.describe(left)
        procs.kill_all(lambda: procs.marked(mark, var=MARK))
    else:
        described = []
    measured, kept, status = _iterations(folder)
    detect = _detection_s(folder, err) if ending == "hang" else None
    return {"run": i, "ending": ending, "schedule": schedule, "exit": proc.returncode,
            "wall_s": round(ended - t0, 1), "gone_s": round(gone_s, 1), "leftover": len(left),
            "leftover_procs": described, "shm_kb": (shm_bytes() - shm_before) // 1024,
            "measured": measured, "kept": kept, "lost": max(0, measured - kept), "status": status,
            "detect_s": detect,
            "error": err.strip().splitlines()[-1][:100] if err.strip() else ""}


def _wait_iterations(folder: Path, proc, n: int) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        its = list(folder.glob("*/*/iterations.jsonl"))  # <folder>/<run>/<cell>/
        if its and len(its[0].read_text().splitlines()) >= n:
            return
        time.sleep(0.3)


def _end(ending: str, proc, mark: str) -> None:
    from rlbench.core.devices import procs

    if ending == "ctrl_c":
        os.killpg(proc.pid, signal.SIGINT)
    elif ending == "kill_run":
        proc.kill()
    else:  # a worker: a child of the cell process (itself a child of `rlbench run`), not a resource tracker
        run = [p for p in procs.marked(mark, var=MARK) if b"resource_tracker" not in _cmdline(p)]
        cells = [p for p in run if procs.parent_pid(p) == proc.pid]
        workers = [p for p in run if procs.parent_pid(p) in cells]
        if workers:
            os.kill(workers[0], signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def _iterations(folder: Path) -> tuple[int, int, str]:
    """(iterations appended to iterations.jsonl, iterations in results.json, the cell's status)."""
    for cell in folder.glob("*/*/"):
        lines = (cell / "iterations.jsonl").read_text().splitlines() if (cell / "iterations.jsonl").exists() else []
        try:
            res = json.loads((cell / "results.json").read_text())
        except (OSError, ValueError):
            return len(lines), 0, "no results.json"
        return len(lines), len(res["iterations"]), res["status"]
    return 0, 0, "no cell folder"


def _detection_s(folder: Path, err: str) -> float | None:
    """Hang watchdog detection time: from the moment the planted hang began (the fault hook prints it) to
    the failed cell's results.json (written when the watchdog ended the run)."""
    import re

    m = re.search(r"hung from t=([0-9.]+)", err)
    res = next(folder.glob("*/*/results.json"), None)
    if not m or res is None:
        return None
    return round(res.stat().st_mtime - float(m.group(1)), 2)


def shm_bytes() -> int:
    total = 0
    for f in Path("/dev/shm").iterdir() if Path("/dev/shm").is_dir() else []:
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return total


def row_text(r: dict) -> str:
    return (f"| {r['run']} | {r['ending']} | {r['schedule']} | {r['exit']} | {r['wall_s']} | {r['gone_s']} | "
            f"{r['leftover']} | {r['shm_kb']} | {r['measured']} | {r['kept']} | {r['lost']} | {r['status']} | "
            f"{'' if r.get('detect_s') is None else r['detect_s']} |")


def table(rows: list[dict], mem_before: int | None, mem_after: int | None) -> str:
    head = ("| run | ending | schedule | exit | wall s | all gone after s | leftover procs | /dev/shm growth KiB | "
            "iterations measured | kept in results.json | lost | status | watchdog detection s |\n|" + "---|" * 13)
    lines = [head] + [row_text(r) for r in rows]
    bad = [p for r in rows for p in r["leftover_procs"]]
    mem = (f"available memory before {mem_before / 2**30:.2f} GiB, 10 s after the last run "
           f"{mem_after / 2**30:.2f} GiB" if mem_before and mem_after else "available memory: unknown")
    lines += ["", f"{len(rows)} runs; leftover processes: {sum(r['leftover'] for r in rows)}; lost iterations: "
                  f"{sum(r['lost'] for r in rows)}; unexpected exit codes: "
                  f"{sum(r['exit'] != EXPECTED_EXIT[r['ending']] for r in rows)}; {mem}"]
    lines += [f"leftover: {p}" for p in bad]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
