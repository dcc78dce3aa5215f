"""Write the history entries of real A/B folders, whatever their verdict, as `rlbench check --record` writes
a passing one: the measured steps tests/test_check_drift_planted.py assembles its series from
(tests/fixtures/history/measured.jsonl).

Usage: python scripts/history_fixture.py OUT.jsonl AB_DIR...   (each AB_DIR made by `rlbench check --against`)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rlbench.check import against, history


def main(out: str, *dirs: str) -> None:
    for d in map(Path, dirs):
        record = json.loads((d / against.AB_FILE).read_text())
        entry = history.entry("step", {**record, "folder": d.parent.name}, against.judge(d))
        print(f"{history.append(Path(out), entry)}: {d.parent.name} {entry['verdict']['line']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
