"""Reports: tables, plots, self-contained HTML, compare and console table (the speedup prediction:
tests/unit/core/test_predict_async.py).

Result folders are written by tests/support/report_runs.py with rlbench.core.results.metrics, as the runner does.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from matplotlib import image as mpimg

from conftest import ROOT
from support.report_runs import make_ablation, make_cell
from rlbench.core.errors import UserError
from rlbench.core.record.stages import OUTSIDE_STAGES, Stage
from rlbench.reporting import build_report, summary_table_text
from rlbench.reports import compare
from rlbench.reports.palette import stage_color
from rlbench.reports.tables import COMPACT_HEAD, KEY

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ["tpspd", "speedup", "stage_breakdown", "timeline", "reward_accuracy", "staleness", "accuracy_time",
         "tpspd_accuracy"]


@pytest.fixture
def ablation(tmp_path) -> Path:
    return make_ablation(tmp_path / "abl", iterations=6, async_iterations=6)  # 5 measured pairs: an interval


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The ablation with its report built, once for the module: the tests that take it only read it."""
    folder = make_ablation(tmp_path_factory.mktemp("built") / "abl", iterations=6, async_iterations=6)
    build_report(folder)
    return folder


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def test_summary_csv_columns_and_tpspd(built):
    df = pd.read_csv(built / "summary.csv")
    assert list(df["cell"]) == ["sync", "periodic_async"]
    expected = {"cell", "schedule", "tri_model", "shared_prompt", "tpspd_median", "tpspd_min",
                "tpspd_max", "speedup", "rollout_tok_s", "train_tok_s", "rollout_occupancy",
                "accuracy_before", "accuracy_after", "staleness_max", "status",
                "idle_colocated_pct", "idle_trainer_pct", "idle_rollout0_pct"}
    expected |= {f"stage_{s.value}_s" for s in Stage if s.value not in OUTSIDE_STAGES}
    assert expected <= set(df.columns)
    for row in df.itertuples():
        agg = results(built / row.cell)["aggregates"]
        assert row.tpspd_median == pytest.approx(agg["tpspd"]["median"], rel=1e-12)
        assert row.tpspd_min == pytest.approx(agg["tpspd"]["min"], rel=1e-12)
        assert row.stage_update_s == pytest.approx(agg["stage_s"]["update"], rel=1e-12)
    ref = df["tpspd_median"][0]
    assert df["speedup"].tolist() == pytest.approx([1.0, df["tpspd_median"][1] / ref])
    assert df["speedup"][1] > 1.0  # the fixture's async cell overlaps training with the tail
    assert "| cell |" in (built / "summary.md").read_text()


def test_plots_are_valid_pngs(built):
    for name in PLOTS:
        path = built / "plots" / f"{name}.png"
        data = path.read_bytes()
        assert data[:8] == PNG_SIGNATURE, name
        assert len(data) > 5_000, name
        img = mpimg.imread(path)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100, name
        assert img[..., :3].std() > 0.01, f"{name} is blank"


def test_html_is_self_contained(built):
    html = (built / "report.html").read_text()
    assert "http://" not in html and "https://" not in html
    srcs = re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == len(PLOTS)
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<script" not in html.lower() and "<link" not in html.lower()
    assert html.count("<details>") >= 4  # per cell: provenance and config
    assert "max_num_seqs" in html and "git_commit" in html  # config and provenance shown
    assert "measured_speedup" in html and "predicted_speedup" in html


def test_html_defangs_urls_from_results(tmp_path):
    cell = make_cell(tmp_path / "c", "sync", "sync")
    res = results(cell)
    res["config"]["model"]["path"] = "https://example.org/model"
    (cell / "results.json").write_text(json.dumps(res))
    html = build_report(cell).read_text()
    assert "https://" not in html and "example.org" in html


def test_single_interrupted_cell_without_iterations(tmp_path):
    cell = make_cell(tmp_path / "run", "periodic_async", "periodic_async", iterations=0,
                     status="interrupted")
    path = build_report(cell)
    df = pd.read_csv(cell / "summary.csv")
    assert df["status"].tolist() == ["interrupted"] and df["tpspd_median"].isna().all()
    assert "interrupted" in path.read_text()
    assert (cell / "plots" / "timeline.png").read_bytes()[:8] == PNG_SIGNATURE
    assert not (cell / "plots" / "speedup.png").exists()
    assert "interrupted" in summary_table_text(cell)


def test_ablation_with_interrupted_async_cell(tmp_path):
    run = make_ablation(tmp_path / "abl", async_iterations=2, async_status="interrupted")
    build_report(run)
    df = pd.read_csv(run / "summary.csv")
    assert df["status"].tolist() == ["complete", "interrupted"]
    assert df["tpspd_median"].notna().all()


def test_not_a_run_folder(tmp_path):
    with pytest.raises(UserError, match="neither a run folder"):
        build_report(tmp_path)


def test_compare_ratio_by_name_and_position(tmp_path):
    a = make_ablation(tmp_path / "a")
    b = make_ablation(tmp_path / "b", scale=0.5)  # every stage twice as fast: TPSPD x2
    df, text = compare(a, b)
    tp = df[df["metric"] == "tpspd_median"]
    assert tp["cell_a"].tolist() == ["sync", "periodic_async"]
    assert tp["b_over_a"].tolist() == pytest.approx([2.0, 2.0], rel=1e-9)
    assert "cells matched by name" in text and "tpspd_median" in text
    c = make_ablation(tmp_path / "c", scale=0.25, names=("base", "async"))
    df, text = compare(a, c)
    tp = df[df["metric"] == "tpspd_median"]
    assert tp["cell_b"].tolist() == ["base", "async"]
    assert tp["b_over_a"].tolist() == pytest.approx([4.0, 4.0], rel=1e-9)
    assert "matched by position" in text


def test_compare_shows_every_run_side_by_side(tmp_path):
    """Three runs: the side-by-side table has a column and a ratio over the first for each (it showed the
    first two)."""
    a = make_ablation(tmp_path / "a")
    b = make_ablation(tmp_path / "b", scale=0.5)
    c = make_ablation(tmp_path / "c", scale=0.25)
    df, text = compare(a, b, c)
    tp = df[df["metric"] == "tpspd_median"]
    assert tp["b_over_a"].tolist() == pytest.approx([2.0, 2.0], rel=1e-9)
    assert tp["c_over_a"].tolist() == pytest.approx([4.0, 4.0], rel=1e-9)
    assert f"C: {c}" in text and "c_over_a" in text


def test_terminal_opens_with_the_verdict_and_fits_100_columns(ablation):
    text = summary_table_text(ablation)
    lines = text.splitlines()
    assert lines[0] == "Verdict:" and lines[1].startswith("  periodic_async 1.16× sync's TPSPD (95% interval ")
    # the fixture's async cell overlaps the tail, every iteration alike: an interval above 1
    assert "wins here" in " ".join(lines[1:3]) and "64% of its" in text
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    head = next(line for line in lines if line.startswith("cell"))
    assert head.split("  ")[0] == "cell" and [h for h in KEY if h in head] == KEY
    assert "rollout tok/s" not in text and "rollout %: share" not in text  # --wide's columns and definitions
    assert "--wide" in lines[-1]


def test_wide_prints_every_headline_column_and_section(ablation):
    text = summary_table_text(ablation, wide=True)
    assert text.startswith("Verdict:\n  periodic_async 1.16× sync's TPSPD")
    head = next(line for line in text.splitlines() if line.startswith("cell "))
    assert all(h in head for h in COMPACT_HEAD) and len(head) > 100
    assert "rollout %: share of a sync iteration" in text and "pass@1 first→final" in text  # and accuracy


def test_a_table_wider_than_the_window_is_split_into_blocks():
    from rlbench.reports.text_table import fit

    rows = [["a-long-cell-name", "x" * 30, "y" * 30, "z" * 30]]
    lines = fit(["cell", "one", "two", "three"], rows, width=90)
    assert max(map(len, lines)) <= 90 and lines.count("") == 1  # two blocks
    assert [line.split()[0] for line in lines if line and not line.startswith("-")] == \
        ["cell", "a-long-cell-name", "cell", "a-long-cell-name"]  # each block keeps the cell column


@pytest.mark.parametrize("value, low, high, word", [
    (0.67, 0.60, 0.75, "loses"), (0.95, 0.85, 1.02, "even"), (1.30, 0.98, 1.70, "even"),
    (1.03, 1.01, 1.05, "wins"), (1.10, None, None, "too few"), (None, None, None, None)])
def test_outcome_is_read_from_the_interval(value, low, high, word):
    """Wins or loses only where the interval excludes 1, however far the ratio itself is from 1."""
    from rlbench.analysis.intervals import outcome

    assert outcome(value, low, high) == word


def test_interval_from_paired_iterations():
    """Per-iteration ratios near 0.9 give an interval below 1; a scatter across 1 gives one that includes it;
    two seeds give none (fewer than 4 paired samples)."""
    import math

    from rlbench.analysis.intervals import over_seeds
    from rlbench.core.ratio_interval import ratio_interval

    _, lo, hi = ratio_interval([math.log(v) for v in (0.88, 0.9, 0.91, 0.89, 0.93, 0.9)])
    assert 0.85 < lo < 0.9 < hi < 0.95
    _, lo, hi = ratio_interval([math.log(v) for v in (0.7, 1.3, 0.9, 1.2, 0.8, 1.1)])
    assert lo < 1 < hi
    assert over_seeds([0.9, 0.91], 0.905).low is None and over_seeds([0.9, 0.91], 0.905).outcome == "too few"
    assert over_seeds([0.9, 0.91, 0.89, 0.9], 0.9).outcome == "loses"


def test_verdict_sentence_names_the_two_factors():
    from rlbench.analysis.intervals import Ratio
    from rlbench.analysis.verdict import Comparison
    from rlbench.reports.verdict_text import comparison_sentence

    c = Comparison("periodic_async", "sync", 0.6695, 0.69, 0.17, "periodic_async_barrier", 0.65, 1.03,
                   Ratio(0.6695, 0.62, 0.71, 17, "interleaved iterations"))
    assert comparison_sentence(c) == (
        "periodic_async 0.67× sync's TPSPD (95% interval 0.62–0.71× over 17 interleaved iterations; predicted "
        "0.69×): loses here. The sync cell spends 17% of its iteration generating; the device split costs 0.65×, "
        "overlap gives back 1.03×.")
    one_after_another = Comparison("periodic_async", "sync", 0.6695, 0.69, 0.17, interval=Ratio(0.6695, 0.62, 0.71, 17))
    assert comparison_sentence(one_after_another).startswith(
        "periodic_async 0.67× sync's TPSPD (95% interval 0.62–0.71× over 17 iterations, the cells one after "
        "another: exposed to the machine's drift; predicted 0.69×): not called (`--set run.interleave=true` "
        "calls it).")  # no wins / loses word where the machine's drift between the cells is not in the interval
    other = Comparison("periodic_async", "sync", 1.08, 1.2, None, "periodic_async_barrier", 1.05, 0.95,
                       Ratio(1.08, 0.97, 1.19, 6, "interleaved iterations"))
    assert comparison_sentence(other).endswith("(95% interval 0.97–1.19× over 6 interleaved iterations; predicted "
                                               "1.20×): even here: the interval includes 1. The device split gives "
                                               "1.05×, overlap costs 0.95×.")
    even = Comparison("periodic_async", "sync", 1.01, None, None, interval=Ratio(1.01, n=2))
    assert comparison_sentence(even) == ("periodic_async 1.01× sync's TPSPD (too few paired iterations for a 95% "
                                         "interval (2; ratio of medians), the cells one after another: exposed to "
                                         "the machine's drift; predicted n/a): too few iterations to call.")


def test_a_run_without_a_comparison_names_its_fastest_cell_the_reference_where_nothing_beats_it():
    from rlbench.reports.verdict_text import _fastest

    assert _fastest(("sync+shared_prompt", 1.25, "sync")) == "fastest cell: sync+shared_prompt, 1.25× sync's TPSPD"
    assert _fastest(("sync+shared_prompt", 0.92, "sync")) == ("sync is the fastest cell (the next, "
                                                             "sync+shared_prompt, 0.92× its TPSPD)")


def test_summary_md_leads_with_the_verdict_and_at_most_8_columns(built):
    md = (built / "summary.md").read_text()
    first = next(line for line in md.splitlines() if line.startswith("|"))
    assert md.index("## Verdict") < md.index(first) and "- periodic_async 1.16× sync's TPSPD" in md
    assert first.count(" | ") + 1 <= 8 and first.startswith("| cell | TPSPD median (min–max) |")
    assert "summary.csv" in md and len(pd.read_csv(built / "summary.csv").columns) > 20  # every column there


def test_report_html_opens_with_the_verdict_and_no_table_scrolls(built):
    from rlbench.reports.html import PAGE_CHARS

    html = (built / "report.html").read_text()
    h2 = re.findall(r"<h2[^>]*>([^<]*)</h2>", html)
    assert h2[0] == "Verdict" and h2[1] == "Summary"
    assert "wins here" in html.split("<h2", 2)[1] and 'class="scroll"' not in html
    for t in re.findall(r"<table>.*?</table>", html, re.S):  # every table within the page's width
        rows = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r) for r in re.findall(r"<tr>(.*?)</tr>", t)]
        widths = [max(min(len(r[i]), 30) for r in rows[1:] or rows) + 3 for i in range(len(rows[0]))]
        assert len(rows[0]) <= 2 or sum(widths) <= PAGE_CHARS + max(widths), rows[0]


def test_reports_import_only_the_result_core():
    code = ("import sys, rlbench.reports; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', "
            "'rlbench.engines', 'rlbench.run', 'rlbench.core.results.metrics', 'rlbench.core.config'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = ROOT
    src = "\n".join(p.read_text() for p in root.joinpath("reports").glob("*.py"))
    used = set()
    for pkg, names in re.findall(r"from rlbench((?:\.\w+)*) import ([\w, ]+)", src):
        for name in (n.split(" as ")[0].strip() for n in names.split(",")):
            module = f"{pkg[1:]}.{name}".strip(".")  # `from rlbench.core.results import schema`: a module
            top = module.split(".")[0]
            path = root.joinpath(*module.split(".")) if (root / top / "__init__.py").is_file() else \
                root.joinpath("bench", *module.split("."))
            used.add(module if path.with_suffix(".py").is_file() or path.is_dir() else pkg[1:])
    used = {u for u in used if u.split(".")[0] != "reports"}
    # what they render: the analysis, and from the core the result schema, the metric table, the stage
    # names, the errors, the schedule and experiment records and the cost model's text (no engine, no harness)
    allowed = ("analysis", "core.results.schema", "core.results.metric_table", "core.record.stages", "core.errors",
               "core.costmodel", "core.schedules", "core.experiments")
    assert all(any(u == a or u.startswith(a + ".") for a in allowed) for u in used), used


def test_every_stage_has_its_own_colour():
    colours = [stage_color(s.value) for s in Stage]
    assert len(set(colours)) == len(colours)


def test_screenshot_script_shoots_the_first_screen_and_every_section(built, tmp_path):
    """scripts/screenshot_report.py: a PNG of the first screen, then one per <h2> section, none blank."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import screenshot_report

    if screenshot_report.browser() is None:
        pytest.skip("no headless Chromium: apt-get install chromium")
    proc = subprocess.run([sys.executable, "scripts/screenshot_report.py", str(built), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    titles = re.findall(r"<h2[^>]*>([^<]*)</h2>", (built / "report.html").read_text())
    shots = sorted(tmp_path.glob("section-*.png"))
    assert len(shots) == len(titles) and shots[0].name == "section-01-verdict.png"
    first = mpimg.imread(tmp_path / "first-screen.png")
    assert first.shape[:2] == (800, 1280) and first[..., :3].std() > 0.05
    for shot in shots:
        img = mpimg.imread(shot)
        assert img.shape[1] == 1280 and 40 < img.shape[0] < 16000 and img[..., :3].std() > 0.02, shot.name


@pytest.mark.parametrize("command", ["run", "report"])
def test_help_ends_with_what_the_columns_mean(command):
    """The definitions the terminal no longer prints after every run are at the end of --help."""
    from typer.testing import CliRunner

    from rlbench.cli import app

    text = " ".join(CliRunner().invoke(app, [command, "--help"], terminal_width=200).output.split())
    for phrase in ("What the table and the verdict say", "rollout %: share of a sync iteration spent generating",
                   "even: the interval includes 1", "--wide"):
        assert phrase in text, phrase


def test_a_cell_stopped_during_warm_up_reports_no_tpspd():
    """A cell interrupted before its first measured iteration (a timeout during the warm-up) has no
    TPSPD: its warm-up iteration is kept in `iterations`, never presented as the cell's measurement."""
    from rlbench.core.results.metrics import aggregate

    warm = {"iteration": 0, "warmup": True, "tpspd": 505.8, "wall_s": 24.3, "rollout_tokens_per_s": 349.4,
            "train_tokens_per_s": 3330.4, "stage_s": {"rollout": 20.6}, "idle_frac": {"colocated0": 0.0},
            "staleness_max": 0, "staleness_mean": 0.0, "reward_mean": 0.0, "tokens": 12301}
    agg = aggregate([warm], [])
    assert agg["tpspd"] == {"median": None, "min": None, "max": None, "n": 0}
    assert agg["measured_iterations"] == 0 and agg["total_tokens"] == 12301
    measured = aggregate([warm, {**warm, "iteration": 1, "warmup": False, "tpspd": 600.0}], [])
    assert measured["tpspd"]["median"] == 600.0 and measured["measured_iterations"] == 1


def test_a_cell_with_optimisations_but_no_sync_twin_is_predicted_for_the_schedule_alone(tmp_path):
    """Where no sync cell ran with a periodic-async cell's optimisations (the ci ablation's +tri_model), the
    prediction comes from a sync cell without them: it is the schedule's alone, said so in the verdict, and
    no error against the measurement is computed (what the optimisation adds is not in the model)."""
    from rlbench.analysis.data import load
    from rlbench.analysis.speedup import speedup_frame
    from rlbench.analysis.summary import summary_frame
    from rlbench.analysis.verdict import verdict_of
    from rlbench.core.results import schema
    from rlbench.reports.verdict_text import comparison_sentence

    plain = load(make_ablation(tmp_path / "plain"))
    run_dir = make_ablation(tmp_path / "tri")
    res = json.loads((run_dir / "periodic_async" / schema.RESULTS).read_text())
    res["switches"]["tri_model"] = True
    schema.atomic_write_json(run_dir / "periodic_async" / schema.RESULTS, res)
    run = load(run_dir)
    before, after = speedup_frame(plain).iloc[0], speedup_frame(run).iloc[0]
    assert not before["schedule_only"] and before["error_pct"] is not None
    assert after["schedule_only"] and after["error_pct"] is None
    assert after["predicted_speedup"] == before["predicted_speedup"] > 0  # the same sync cell's costs
    (c,) = verdict_of(run, speedup_frame(run), summary_frame(run)).comparisons
    assert "for the schedule alone: no sync cell ran with its optimisations" in comparison_sentence(c)
    (c,) = verdict_of(plain, speedup_frame(plain), summary_frame(plain)).comparisons
    assert "schedule alone" not in comparison_sentence(c)
