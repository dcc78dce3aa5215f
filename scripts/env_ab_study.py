"""The measured power and cost of `rlbench check --env-a A --env-b B` (docs/results/ci-gate.md,
'Environments'): rounds of A/B runs on the gate's workload (configs/ci-ab.yaml, the `ci` ablation), each
judged alone (--no-confirm), taking turns so that every kind sees the machine's busy and quiet minutes alike:

- `same`: the same environment on both sides (A and B this Python): every failure is a false one;
- `planted`: the same, with one stage of B slower (RLBENCH_SLOW=SPEC, B only): a detection when the A/B
  fails and the report's line of the stages that moved names that stage;
- `commit`: today's commit A/B of the same workload (`--against HEAD`: this tree against its own commit),
  whose wall time the environment A/B's is set against, round by round.

    python scripts/env_ab_study.py OUT --rounds 5 [--kinds same,planted,commit] [--slow update:0.10]
    python scripts/env_ab_study.py OUT --summary          # the numbers again, from OUT's A/B folders

Two studies may write into one OUT at once (e.g. --kinds planted beside --kinds same,commit, on a machine
where other work leaves the cores shared anyway): --summary reads them all.

Prints one line per A/B run as it ends, then the counts, the wall times and their ratio per round.
LOCK=FILE runs each A/B under `flock FILE` (other heavy work on a shared machine takes turns between them).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("same", "planted", "commit")
MOVED = "stages that moved (B / A): "


def one(out: Path, kind: str, i: int, slow: str) -> dict:
    """Run one A/B of `kind` into out/KIND-I/; -> its summary."""
    folder = out / f"{kind}-{i}"
    python = sys.executable
    args = ["--against", "HEAD"] if kind == "commit" else ["--env-a", python, "--env-b", python]
    cmd = [python, "-m", "rlbench.cli", "check", *args, "--no-confirm", "--out", str(folder)]
    if os.environ.get("LOCK"):
        cmd = ["flock", os.environ["LOCK"], *cmd]
    env = {k: v for k, v in os.environ.items() if k not in ("RLBENCH_SLOW", "RLBENCH_FAULT")}
    if kind == "planted":
        env["RLBENCH_SLOW"] = slow
    start = time.monotonic()
    with open(out / f"{kind}-{i}.txt", "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    (out / f"{kind}-{i}.wall").write_text(f"{time.monotonic() - start:.1f}\n")  # the whole command
    return summarise(folder, kind, code)


def summarise(folder: Path, kind: str, code: int | None = None) -> dict:
    """An A/B folder's verdict, wall times (the two sides' run: ab.json wall_s; the whole command, its
    set-up included: KIND-I.wall), load and the stages its report names as moved."""
    ab_json = next(folder.glob("*/ab.json"), None)
    record = json.loads(ab_json.read_text()) if ab_json else {}
    text = (folder.parent / f"{folder.name}.txt")
    lines = text.read_text().splitlines() if text.is_file() else []
    moved_line = next((ln for ln in lines if ln.startswith(MOVED)), "")
    moved = [p.split()[0] for p in moved_line[len(MOVED):].split("; ")] if moved_line else []
    verdict = next((ln.split()[0].rstrip(":") for ln in lines if ln.startswith(("PASS", "FAIL"))), "?")
    if code is None:
        code = {"PASS": 0, "FAIL": 1}.get(verdict)
    wall = folder.parent / f"{folder.name}.wall"
    return {"kind": kind, "name": folder.name, "exit": code, "verdict": verdict,
            "wall_s": record.get("wall_s"), "load": record.get("load"), "moved": moved,
            "command_s": float(wall.read_text()) if wall.is_file() else None,
            "moved_line": moved_line, "failed": _failures(lines)}


def _failures(lines: list[str]) -> list[str]:
    """The metrics a FAIL verdict lists (its indented lines), name and change only."""
    start = next((i for i, ln in enumerate(lines) if ln.startswith("FAIL")), len(lines))
    return [" ".join(ln.split()[:2]).rstrip(":") for ln in lines[start + 1:] if ln.startswith("  ")]


def show(r: dict) -> str:
    load = "/".join(f"{x:.1f}" for x in r["load"]) if r["load"] else "?"
    wall = f"{r['wall_s']:.0f} s" if r["wall_s"] else "? s"
    if r["command_s"]:
        wall += f" ({r['command_s']:.0f} s the whole command)"
    said = r["moved_line"] or (r["failed"][0] if r["failed"] else "")
    return f"{r['name']}: exit {r['exit']} {r['verdict']} in {wall}, load {load}: {said[:160]}"


def report(results: list[dict], stage: str) -> None:
    """The counts and the wall times."""
    by = {k: [r for r in results if r["kind"] == k] for k in KINDS}
    if by["same"]:
        false = [r for r in by["same"] if r["exit"] != 0]
        print(f"same environment on both sides: {len(false)} false failures in {len(by['same'])} A/Bs"
              + "".join(f"\n  {r['name']}: {'; '.join(r['failed'][:2])}" for r in false))
    if by["planted"]:
        failed = [r for r in by["planted"] if r["exit"] == 1]
        named = [r for r in failed if stage in r["moved"]]
        print(f"planted {stage} slower in B: failed {len(failed)} of {len(by['planted'])} A/Bs, "
              f"naming {stage} among the stages that moved in {len(named)}")
    for key, what in (("wall_s", "the two sides' run"), ("command_s", "the whole command")):
        for k, v in by.items():
            w = [r[key] for r in v if r[key]]
            if w:
                print(f"wall time ({what}), {k}: median {statistics.median(w):.0f} s "
                      f"({min(w):.0f}-{max(w):.0f} s, {len(w)} runs)")
        pairs = [(s[key], c[key]) for s in by["same"] for c in by["commit"]
                 if s["name"].split("-")[1] == c["name"].split("-")[1] and s[key] and c[key]]
        if pairs:
            ratios = [s / c for s, c in pairs]
            print(f"environment A/B / commit A/B ({what}), same round: median "
                  f"{statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--kinds", default=",".join(KINDS), help="which A/Bs each round runs, in this order")
    p.add_argument("--slow", default="update:0.10", help="RLBENCH_SLOW of the planted runs (B only)")
    p.add_argument("--first", type=int, default=1, help="the first round's number (to add rounds to OUT)")
    p.add_argument("--summary", action="store_true", help="summarise OUT's A/B folders, run nothing")
    a = p.parse_args()
    kinds, stage = [k for k in a.kinds.split(",") if k], a.slow.split(":")[0]
    if not set(kinds) <= set(KINDS):
        p.error(f"--kinds: allowed {', '.join(KINDS)}")
    a.out.mkdir(parents=True, exist_ok=True)
    results = []
    if a.summary:  # every finished A/B under OUT (one still running, or stopped, has no verdict)
        for folder in sorted(f for f in a.out.iterdir() if f.is_dir() and f.name.split("-")[0] in KINDS):
            r = summarise(folder, folder.name.split("-")[0])
            print(show(r))
            if r["exit"] is not None:
                results.append(r)
    else:
        for i in range(a.first, a.first + a.rounds):
            for kind in kinds:
                results.append(one(a.out, kind, i, a.slow))
                print(show(results[-1]), flush=True)
    report(results, stage)
    return 0


if __name__ == "__main__":
    sys.exit(main())
