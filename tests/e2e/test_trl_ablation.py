"""`--ablation trl_on_policy`: rlbench's sync beside TRL's two on-policy cells, peers' first three (the
comparison a short window has time for): the same cells and shared settings as in `--ablation peers`, and a run of it
through the CLI on the tiny config with its table against TRL."""
import csv

import pytest

from conftest import TINY
from support.cli import rlbench
from rlbench.core.config_files import load_config
from rlbench.core.results import schema
from rlbench.run.ablation import cells_for


def test_its_cells_are_peers_sync_trl_and_trl_cb_with_the_same_settings():
    base = load_config(TINY, [])
    trl, peers = dict(cells_for("trl_on_policy", base)), dict(cells_for("peers", base))
    assert list(trl) == ["sync", "trl", "trl_cb"]
    for name, cfg in trl.items():
        assert cfg == peers[name], name  # TRL's advantage epsilon, turns by iteration: as in peers
    assert trl["sync"].train.adv_eps == 1e-4 and trl["trl"].run.interleave


@pytest.mark.e2e
def test_a_run_compares_sync_with_both_trl_cells(tmp_path):
    pytest.importorskip("trl")
    proc = rlbench("run", "--config", TINY, "--no-progress", "--ablation", "trl_on_policy",
                   "--set", "run.iterations=2", "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert [c["name"] for c in schema.read_ablation(run_dir)["cells"]] == ["sync", "trl", "trl_cb"]
    with open(run_dir / "peers.csv") as f:
        rows = {r["cell"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"sync", "trl", "trl_cb"} and float(rows["sync"]["vs_sync"]) == 1.0
    assert all(float(r["tpspd_median"]) > 0 for r in rows.values())
    assert "Against a real framework" in proc.stdout
