"""A real interleaved ablation through `rlbench run` (cpu-tiny): cells take turns by iteration, and a
planted slowdown (RLBENCH_SLOW) reaches only the cells it names and is recorded in their results."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import TINY

from rlbench.core.results import schema


def test_interleaved_cells_take_turns_and_planted_slowdown_is_recorded(tmp_path):
    env = {**os.environ, "RLBENCH_SLOW": "update:0.5@periodic_async"}
    proc = subprocess.run([sys.executable, "-m", "rlbench.cli", "run", "--config", str(TINY), "--ablation", "async",
                           "--set", "run.interleave=true", "--out", str(tmp_path), "--no-progress", "--no-report"],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    cells = {r["cell"]: r for r in schema.load_run(run_dir)}
    order = [c["name"] for c in json.loads((run_dir / schema.ABLATION).read_text())["cells"]]
    assert order == ["sync", "periodic_async_barrier", "periodic_async"]
    spans = []  # every iteration on the one system-wide clock (each cell's times count from its clock_t0)
    for name, r in cells.items():
        assert r["status"] == "complete"
        spans += [(r["clock_t0"] + it["start"], r["clock_t0"] + it["end"], name, it["iteration"])
                  for it in r["iterations"]]
    spans.sort()
    assert [(n, k) for _, _, n, k in spans] == [(n, k) for k in range(3) for n in order]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two cells' iterations overlap
    assert cells["periodic_async"]["planted_slowdown"] == {"update": 0.5}
    assert cells["periodic_async_barrier"]["planted_slowdown"] == {"update": 0.5}
    assert "planted_slowdown" not in cells["sync"]
