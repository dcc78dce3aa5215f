"""--seeds: parsing, cell expansion, bad input, and a real two-seed run through the CLI."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import TINY
from support.cli import rlbench
from rlbench.core.config_files import load_config
from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.run.ablation import cells_for
from rlbench.run.seeds import expand, parse_seeds


def test_parse_seeds():
    assert parse_seeds("0,1,2") == [0, 1, 2]
    assert parse_seeds(None) is None and parse_seeds("") is None
    with pytest.raises(UserError, match="--seeds 'a,1'"):
        parse_seeds("a,1")
    with pytest.raises(UserError, match="at most once"):
        parse_seeds("1,1")


def test_expand_is_seed_major_and_sets_run_seed():
    cells = cells_for("async", load_config(TINY))
    out = expand(cells, [3, 7])
    assert [n for n, _, _ in out] == [f"{c}@seed{s}" for s in (3, 7) for c, _ in cells]
    assert [cfg.run.seed for _, cfg, _ in out] == [3] * 3 + [7] * 3
    assert all(cfg.engine == orig.engine for (_, cfg, _), (_, orig) in zip(out, cells * 2))
    one = expand(cells, [5])  # one seed: names unchanged, the seed applied
    assert [n for n, _, _ in one] == [c for c, _ in cells] and {cfg.run.seed for _, cfg, _ in one} == {5}
    assert [n for n, _, _ in expand(cells, None)] == [c for c, _ in cells]


def test_bad_seeds_exit_2_before_anything_runs(tmp_path):
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--seeds", "0,x", "--no-progress")
    assert proc.returncode == 2 and "--seeds '0,x'" in proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.e2e
def test_two_seed_run_through_the_cli(two_seed_run):
    run_dir, proc, _ = two_seed_run  # conftest.py's: the two seeds side by side where there are two cores
    abl = json.loads((run_dir / schema.ABLATION).read_text())
    assert abl["seeds"] == [0, 1] and [c["name"] for c in abl["cells"]] == ["sync@seed0", "sync@seed1"]
    res = [json.loads((run_dir / c["dir"] / schema.RESULTS).read_text()) for c in abl["cells"]]
    assert [r["config"]["run"]["seed"] for r in res] == [0, 1]
    assert res[0]["final_params_sha256"] != res[1]["final_params_sha256"]  # different seeds, different runs
    df = pd.read_csv(run_dir / "summary.csv")
    assert df["cell"].tolist() == ["sync"] and df["seeds"].tolist() == [2]
    tp = sorted(r["aggregates"]["tpspd"]["median"] for r in res)
    assert df["tpspd_median_seed_min"][0] == pytest.approx(tp[0])
    assert df["tpspd_median"][0] == pytest.approx(sum(tp) / 2)  # median of two
    assert len(pd.read_csv(run_dir / "summary_seeds.csv")) == 2
    assert "median over seeds" in proc.stdout


def test_a_speedup_interval_over_seeds_comes_from_the_seeds_speedups():
    """Aggregated over seeds, a speedup's interval is that of the seeds' speedups (one ratio per seed), not
    a median of each seed's own per-iteration interval."""
    import pandas as pd

    from rlbench.analysis.seeds import aggregate

    per = pd.DataFrame({"cell": ["periodic_async"] * 4, "seed": [0, 1, 2, 3],
                        "measured_speedup": [0.80, 0.82, 0.79, 0.81], "measured_low": [0.5] * 4,
                        "measured_high": [1.5] * 4, "measured_n": [17] * 4, "measured_basis": ["iterations"] * 4})
    row = aggregate(per).iloc[0]
    assert row["measured_basis"] == "seeds" and row["measured_n"] == 4
    assert 0.77 < row["measured_low"] < 0.80 < row["measured_high"] < 0.83  # below 1: loses, by its seeds
