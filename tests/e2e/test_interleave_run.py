"""A real interleaved ablation through `rlbench run` (cpu-tiny): cells take turns by iteration, and a
planted slowdown (RLBENCH_SLOW) reaches only the cells it names and is recorded in their results."""
from __future__ import annotations

import json

import pytest

from conftest import TINY
from support.cli import only_run, rlbench

from rlbench.core.results import schema


@pytest.mark.e2e
def test_interleaved_cells_take_turns_and_planted_slowdown_is_recorded(tmp_path):
    proc = rlbench("run", "--config", TINY, "--ablation", "async", "--set", "run.interleave=true", "--out", tmp_path,
                   "--no-progress", "--no-report", env={"RLBENCH_SLOW": "update:0.5@periodic_async"}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(tmp_path)
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
