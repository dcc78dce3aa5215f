"""Write the history entries of real A/B folders, whatever their verdict, as `rlbench check --record` writes
a passing one: the measured steps tests/unit/harness/test_check_drift_planted.py assembles its series from
(tests/fixtures/history/measured.jsonl).

Usage: python scripts/history_fixture.py OUT.jsonl AB_DIR...   (each AB_DIR made by `rlbench check --against`)
The date is the A/B's (its ab.json, else its folder's stamp); the load, its ab.json's (the load as it ended;
null for folders that predate it: their loads are in docs/results/ci-gate.md).
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from rlbench.check import against, history


def main(out: str, *dirs: str) -> None:
    for d in map(Path, dirs):
        record = json.loads((d / against.AB_FILE).read_text())
        stamp = datetime.strptime(d.name[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)  # the A/B's start
        record.setdefault("date", stamp.isoformat())
        entry = history.entry("step", {**record, "folder": d.parent.name}, against.judge(d))
        entry["machine"]["load"] = record.get("load")  # not the load as this runs
        print(f"{history.append(Path(out), entry)}: {d.parent.name} {entry['verdict']['line']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
