"""Time-to-accuracy and multi-seed aggregation, from fixture result folders (tests/support/accuracy_runs.py):
every number checked against what the files hold."""
from __future__ import annotations

import json
import math
import statistics

import pandas as pd
import pytest

from support.accuracy_runs import EVERY, G, N_EVAL, PROMPTS, clock, make_curve_cell, make_seeded_ablation
from rlbench.reporting import build_report, summary_table_text
from rlbench.analysis.accuracy import TARGET_SHARE, crossing, curve, interval
from rlbench.analysis.data import load
from rlbench.core.results import schema

SYNC = [[0.2, 0.3, 0.4, 0.5, 0.6], [0.25, 0.3, 0.45, 0.5, 0.55], [0.2, 0.35, 0.4, 0.55, 0.6]]
LOGLINEAR = [[0.2, 0.35, 0.45, 0.5, 0.6], [0.25, 0.3, 0.5, 0.55, 0.6], [0.2, 0.3, 0.4, 0.5, 0.5]]
STALE = [[0.2, 0.2, 0.3, 0.3, 0.35]] * 3  # never reaches the target
CELLS = {"sync": ("sync", 2.0, SYNC), "bounded_k1_loglinear": ("bounded_async", 1.5, LOGLINEAR),
         "bounded_k4_recompute": ("bounded_async", 1.2, STALE)}
SEEDS = [0, 1, 2]
T975_DF2 = 4.3026527  # Student t, 97.5% quantile, 2 degrees of freedom (tables: 4.303)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    root = make_seeded_ablation(tmp_path_factory.mktemp("acc") / "abl", CELLS, SEEDS)
    build_report(root)
    return root


def cell_results(root, name: str, seed: int) -> dict:
    return json.loads((root / schema.seeded_name(name, seed) / schema.RESULTS).read_text())


def test_curve_clock_and_samples_match_the_files(tmp_path):
    folder = make_curve_cell(tmp_path / "c", "sync", SYNC[0], wall=2.0)
    res = json.loads((folder / schema.RESULTS).read_text())
    cv = curve(load(folder).cells[0])
    assert cv.iteration == [e["iteration"] for e in res["evals"]] == [0, 2, 4, 6, 8]
    assert cv.accuracy == [e["accuracy"] for e in res["evals"]]
    assert cv.any_format == [e["accuracy_any_format"] for e in res["evals"]]
    assert cv.samples == [k * PROMPTS * G for k in cv.iteration]
    # evaluation and the gaps between iterations are not training time: the clock sums the windows
    assert cv.wall_s == pytest.approx([clock(k, 2.0) for k in cv.iteration])
    its = res["iterations"]
    assert cv.wall_s[-1] < its[-1]["end"] - its[0]["start"] - 1.0  # three evaluations of 0.5 s in between


def test_time_to_target_interpolates_between_evaluations(tmp_path):
    cv = curve(load(make_curve_cell(tmp_path / "c", "sync", [0.2, 0.3, 0.5, 0.6, 0.6], wall=2.0)).cells[0])
    # 0.4 lies half way between the evaluations after 2 (0.3) and 4 (0.5) iterations
    assert crossing(cv, 0.4) == pytest.approx((clock(2, 2.0) + clock(4, 2.0)) / 2)
    assert crossing(cv, 0.4, "samples") == pytest.approx(3 * PROMPTS * G)
    assert crossing(cv, 0.2) == 0.0  # reached before training
    assert crossing(cv, 0.61) is None


def test_accuracy_table_against_the_files(seeded):
    df = pd.read_csv(seeded / "accuracy.csv")
    assert list(df["cell"]) == list(CELLS)
    assert (df["seeds"] == 3).all()
    ev = {s: cell_results(seeded, "sync", s)["evals"] for s in SEEDS}
    target = {s: e[0]["accuracy"] + TARGET_SHARE * (e[-1]["accuracy"] - e[0]["accuracy"]) for s, e in ev.items()}
    assert df["target"].tolist() == pytest.approx([statistics.median(target.values())] * 3)
    for row in df.to_dict("records"):
        res = [cell_results(seeded, row["cell"], s) for s in SEEDS]
        finals = [r["evals"][-1]["accuracy"] for r in res]
        half = T975_DF2 * statistics.stdev(finals) / math.sqrt(3)
        assert row["accuracy_final"] == pytest.approx(statistics.fmean(finals))
        assert row["accuracy_final_lo"] == pytest.approx(max(0.0, statistics.fmean(finals) - half))
        assert row["accuracy_final_hi"] == pytest.approx(min(1.0, statistics.fmean(finals) + half))
        tp = [r["aggregates"]["tpspd"]["median"] for r in res]
        assert row["tpspd_median"] == pytest.approx(statistics.median(tp))
        assert row["train_wall_s"] == pytest.approx(clock(8, CELLS[row["cell"]][1]))
        assert row["mixed_groups_first"] == pytest.approx(6 / PROMPTS)  # fixture: 6 of 8 groups mixed, then 2
        assert row["mixed_groups_last"] == pytest.approx(2 / PROMPTS)
    sync, loglinear, stale = df.to_dict("records")
    # per-seed targets 0.52, 0.49, 0.52; crossings interpolated linearly: seed 0 between 6 (0.5) and 8
    # iterations (0.6), seed 1 between 4 (0.45) and 6 (0.5), seed 2 between 4 (0.4) and 6 (0.55)
    assert [target[s] for s in SEEDS] == pytest.approx([0.52, 0.49, 0.52])
    c4, c6, c8 = clock(4, 2.0), clock(6, 2.0), clock(8, 2.0)
    times = [c6 + (0.52 - 0.5) / 0.1 * (c8 - c6), c4 + (0.49 - 0.45) / 0.05 * (c6 - c4),
             c4 + (0.52 - 0.4) / 0.15 * (c6 - c4)]
    assert [sync[f"time_to_target_s{k}"] for k in ("_min", "", "_max")] == pytest.approx(sorted(times))
    # loglinear: seed 0 between 6 (0.5) and 8 (0.6), seed 1 between 2 (0.3) and 4 (0.5), seed 2 never
    c2 = clock(2, 1.5)
    ll = [clock(6, 1.5) + (0.52 - 0.5) / 0.1 * (clock(8, 1.5) - clock(6, 1.5)),
          c2 + (0.49 - 0.3) / 0.2 * (clock(4, 1.5) - c2)]
    assert loglinear["time_to_target_s"] == pytest.approx(statistics.median(ll))
    assert sync["reached"] == "3/3" and loglinear["reached"] == "2/3" and stale["reached"] == "0/3"
    assert math.isnan(stale["time_to_target_s"])
    assert loglinear["time_ratio_vs_reference"] == pytest.approx(sync["time_to_target_s"] /
                                                                 loglinear["time_to_target_s"])
    assert loglinear["time_ratio_vs_reference"] > 1.0  # faster iterations, same learning per sample


def test_multi_seed_summary_aggregates_per_cell(seeded):
    df = pd.read_csv(seeded / "summary.csv")
    per = pd.read_csv(seeded / "summary_seeds.csv")
    assert list(df["cell"]) == list(CELLS) and (df["seeds"] == 3).all()
    assert len(per) == 3 * len(CELLS) and sorted(set(per["seed"])) == SEEDS
    for row in df.to_dict("records"):
        res = [cell_results(seeded, row["cell"], s) for s in SEEDS]
        tp = [r["aggregates"]["tpspd"]["median"] for r in res]
        assert row["tpspd_median"] == pytest.approx(statistics.median(tp))
        assert row["tpspd_min"] == pytest.approx(min(r["aggregates"]["tpspd"]["min"] for r in res))
        acc = [r["evals"][-1]["accuracy"] for r in res]
        assert row["accuracy_after"] == pytest.approx(statistics.median(acc))
        assert (row["accuracy_after_seed_min"], row["accuracy_after_seed_max"]) == pytest.approx((min(acc), max(acc)))
        assert row["status"] == "complete"
    # speedups are per seed against that seed's own reference cell, then the median
    sp = per[per["cell"] == "bounded_k1_loglinear"]["speedup"]
    assert sp.tolist() == pytest.approx([2.0 / 1.5] * 3)


def test_multi_seed_status_counts_incomplete_seeds(tmp_path):
    root = make_seeded_ablation(tmp_path / "abl", {"sync": CELLS["sync"]}, SEEDS)
    res_path = root / schema.seeded_name("sync", 1) / schema.RESULTS
    res = json.loads(res_path.read_text())
    schema.atomic_write_json(res_path, {**res, "status": "interrupted"})
    build_report(root)
    assert pd.read_csv(root / "summary.csv")["status"].tolist() == ["2/3 complete"]


def test_report_has_accuracy_section_and_plots(seeded):
    html = (seeded / "report.html").read_text()
    assert "time to target" in html and "Accuracy against time and samples" in html
    for name in ("accuracy_time", "tpspd_accuracy"):
        assert (seeded / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    text = summary_table_text(seeded)
    assert "median over seeds" in text and "bounded_k1_loglinear" in text and "0/3" not in text
    assert "0/3" in summary_table_text(seeded, wide=True)  # the time-to-accuracy table: --wide


def test_one_seed_interval_is_wilson_over_the_eval_problems():
    m, lo, hi, method = interval([0.5], N_EVAL)
    assert "Wilson" in method and lo < 0.5 < hi
    # Wilson at p=0.5, n=64: centre 0.5, half-width z*sqrt(p(1-p)/n + z^2/4n^2)/(1+z^2/n)
    z = 1.959964  # the normal 97.5% quantile (tables: 1.96)
    half = z * math.sqrt(0.25 / N_EVAL + z * z / (4 * N_EVAL ** 2)) / (1 + z * z / N_EVAL)
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half))


def test_single_seed_ablation_keeps_its_summary(tmp_path):
    root = make_seeded_ablation(tmp_path / "abl", {k: (s, w, [c[0]]) for k, (s, w, c) in CELLS.items()}, [0])
    build_report(root)
    df = pd.read_csv(root / "summary.csv")
    assert "seeds" not in df.columns and list(df["cell"]) == list(CELLS)
    acc = pd.read_csv(root / "accuracy.csv")
    assert acc["interval"].str.contains("Wilson").all()
    assert not (root / "summary_seeds.csv").exists()
    assert EVERY == 2  # the fixture's evaluation cadence the clock expectations assume


def test_compare_aggregates_seeds_per_cell(seeded, tmp_path):
    """compare on two multi-seed runs: one row per cell and metric, the median over seeds (summary.csv's)."""
    from rlbench.reports.comparison import compare

    other = make_seeded_ablation(tmp_path / "b", {"sync": ("sync", 1.0, SYNC)}, SEEDS)
    df, text = compare(seeded, other)
    assert set(df["cell_a"]) == {"sync"} and "cells matched by name" in text  # seeds folded into the cell
    row = df[df["metric"] == "tpspd_median"].iloc[0]
    assert row["a"] == pytest.approx(pd.read_csv(seeded / "summary.csv")["tpspd_median"][0])
    assert row["b_over_a"] == pytest.approx(2.0, rel=0.01)  # twice as fast per iteration
