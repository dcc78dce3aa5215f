"""Per cell of a run folder: median TPSPD of the iterations that a planted pause preceded against the others.

    RLBENCH_PAUSE=1.0@2,4,6 rlbench run --config configs/cpu-tiny.yaml --ablation families \
        --set run.iterations=8 --out runs/window
    python scripts/window_check.py runs/window/<run> 2,4,6

One window for every schedule (docs/metrics.md) means a ratio near 1 in every cell.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(run: Path, paused: set[int]) -> None:
    print(f"{'cell':16s} {'paused':>8s} {'others':>8s} {'ratio':>6s}")
    for d in sorted(p for p in run.iterdir() if (p / "results.json").is_file()):
        res = json.loads((d / "results.json").read_text())
        its = [it for it in res["iterations"] if not it["warmup"]]
        after = statistics.median(it["tpspd"] for it in its if it["iteration"] in paused)
        others = statistics.median(it["tpspd"] for it in its if it["iteration"] not in paused)
        print(f"{res['cell']:16s} {after:8.0f} {others:8.0f} {after / others:6.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), {int(k) for k in sys.argv[2].split(",")})
