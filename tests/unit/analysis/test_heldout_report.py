"""Held-out-fact columns and the intervals over seeds of the gain and the time to target, from fixture
result folders (tests/support/accuracy_runs.py) whose evaluations are edited to carry a seen-fact score."""
from __future__ import annotations

import json
import math
import statistics

import pandas as pd
import pytest

from support.accuracy_runs import make_seeded_ablation
from rlbench.reporting import build_report
from rlbench.analysis.accuracy import crossing, curve, target_accuracy, curves
from rlbench.analysis.data import load
from rlbench.core.results import schema

SYNC = [[0.2, 0.3, 0.4, 0.5, 0.6], [0.25, 0.3, 0.45, 0.5, 0.55], [0.2, 0.35, 0.4, 0.55, 0.6]]
FAST = [[0.2, 0.4, 0.5, 0.6, 0.6], [0.25, 0.35, 0.5, 0.55, 0.6], [0.2, 0.4, 0.5, 0.6, 0.65]]
SEEDS = [0, 1, 2]
T975_DF2 = 4.3026527  # Student t, 97.5% quantile, 2 degrees of freedom (tables: 4.303)


def add_seen(root, seen_shift: float = 0.3) -> None:
    """Every evaluation of every cell gets accuracy_seen = accuracy + seen_shift (the fact split's file)."""
    for path in root.glob("*/" + schema.RESULTS):
        res = json.loads(path.read_text())
        for ev in res["evals"]:
            ev["accuracy_seen"], ev["n_seen"] = ev["accuracy"] + seen_shift, ev["n"]
        schema.atomic_write_json(path, res)


@pytest.fixture(scope="module")
def fact_run(tmp_path_factory):
    root = make_seeded_ablation(tmp_path_factory.mktemp("heldout") / "abl",
                                {"sync": ("sync", 2.0, SYNC), "fast": ("sync", 2.0, FAST)}, SEEDS)
    add_seen(root)
    build_report(root)
    return root


def t95(xs):
    m = statistics.fmean(xs)
    half = T975_DF2 * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def test_gain_interval_over_seeds(fact_run):
    df = pd.read_csv(fact_run / "accuracy.csv").set_index("cell")
    for name, accs in (("sync", SYNC), ("fast", FAST)):
        m, lo, hi = t95([a[-1] - a[0] for a in accs])
        assert (df.loc[name, "gain"], df.loc[name, "gain_lo"], df.loc[name, "gain_hi"]) == pytest.approx((m, lo, hi))
    assert df.loc["fast", "gain_lo"] > 0  # FAST gains 0.40 / 0.35 / 0.45: an interval above zero
    assert (df["eval_split"] == "fact").all()
    assert df.loc["sync", "seen_first"] == pytest.approx(statistics.median(a[0] + 0.3 for a in SYNC))


def test_time_to_target_interval_over_seeds(fact_run):
    df = pd.read_csv(fact_run / "accuracy.csv").set_index("cell")
    run = load(fact_run)
    targets = target_accuracy(curves(run), "sync")
    fast = [curve(c) for c in run.cells if schema.split_seeded(c.name)[0] == "fast"]
    times = [crossing(cv, targets[cv.seed]) for cv in fast]
    m, lo, hi = t95(times)
    assert df.loc["fast", "time_to_target_s_mean"] == pytest.approx(m)
    assert (df.loc["fast", "time_to_target_s_lo"], df.loc["fast", "time_to_target_s_hi"]) == pytest.approx((lo, hi))
    assert df.loc["fast", "time_to_target_s_mean"] < df.loc["sync", "time_to_target_s_mean"]


def test_summary_has_heldout_and_seen_columns(fact_run):
    df = pd.read_csv(fact_run / "summary.csv").set_index("cell")
    per = pd.read_csv(fact_run / "summary_seeds.csv")
    assert {"accuracy_heldout_before", "accuracy_heldout_after", "accuracy_heldout_gain",
            "accuracy_seen_before", "accuracy_seen_after"} <= set(df.columns)
    sync = per[per["cell"] == "sync"].sort_values("seed")
    assert sync["accuracy_heldout_before"].tolist() == pytest.approx([a[0] for a in SYNC])
    assert sync["accuracy_seen_after"].tolist() == pytest.approx([a[-1] + 0.3 for a in SYNC])
    assert df.loc["sync", "accuracy_heldout_gain"] == pytest.approx(statistics.median(a[-1] - a[0] for a in SYNC))
    assert df.loc["sync", "accuracy_heldout_gain_seed_min"] == pytest.approx(min(a[-1] - a[0] for a in SYNC))


def test_report_labels_the_workload(fact_run, tmp_path):
    html = (fact_run / "report.html").read_text()
    assert "Held-out facts" in html and "seen facts first→final" in html
    text = make_seeded_ablation(tmp_path / "text", {"sync": ("sync", 2.0, SYNC)}, SEEDS)
    build_report(text)
    body = (text / "report.html").read_text()
    assert "format-learning demo" in body and "Held-out facts" not in body
    assert "accuracy_heldout_before" not in pd.read_csv(text / "summary.csv").columns
