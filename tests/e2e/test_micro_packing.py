"""scripts/micro.py --only packing on CPU: the CUDA command's dry run at a toy size (what it writes, not how
fast: no timing is asserted)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT


def _micro(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "micro.py"), "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.e2e
@pytest.mark.slow  # a benchmark's dry run (its GPU command's step is rehearsed in test_gpu_session.py too)
def test_packing_bench_writes_every_layout(tmp_path):
    out = tmp_path / "micro.json"
    res = _micro("--only", "packing", "--model", "configs/models/qwen2.5-0.5b.json", "--layers", "1",
                 "--vocab", "128", "--P", "12", "--R", "5", "--G", "3", "--rounds", "1", "--warmup", "1",
                 "--dtype", "float32", "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    (shape,) = json.loads(out.read_text())["packing"]
    assert (shape["layers"], shape["vocab"], shape["P"], shape["R"], shape["G"]) == (1, 128, 12, 5, 3)
    layouts = {"unpacked", "dense", "gather", "mask4d", "auto"}  # flex: CUDA only
    assert set(shape["seconds"]) == set(shape["forward_seconds"]) == set(shape["peak_memory"]) == layouts
    assert set(shape["speedup"]) == set(shape["min_speedup"]) == layouts - {"unpacked"}
    assert shape["token_ratio"] == pytest.approx(3 * 17 / (12 + 15))
    assert all(v is None or v >= 0 for v in shape["peak_memory"].values())
    assert shape["auto"]["reason"] and isinstance(shape["auto"]["packed"], bool)
    table = subprocess.run([sys.executable, str(ROOT / "scripts" / "micro_packing.py"), str(out)],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "| dense |" in table and "auto:" in table


def test_unknown_shape_is_refused_with_the_choices(tmp_path):
    res = _micro("--only", "packing", "--shapes", "0.5b-p512,13b", "--out", str(tmp_path / "m.json"), timeout=120)
    assert res.returncode == 2
    assert "--shapes: unknown 13b; choices: 0.5b-p512, 0.5b-p2048, 7b-layer, 7b-layer-cpu" in res.stderr
