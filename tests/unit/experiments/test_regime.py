"""The regime map: its grid (bench/experiments/regime/cells.py), the crossover logic (bench/experiments/regime/analysis.py), the report's
headline on hand-written result folders (tests/support/regime_runs.py), and a real quick map through the CLI."""
from __future__ import annotations

import json
import statistics

import pandas as pd
import pytest

from conftest import TINY
from support.cli import only_run, rlbench
from support.regime_runs import MAP, make_regime
from support.report_runs import make_ablation
from rlbench.reporting import build_report, summary_table_text
from rlbench.experiments.regime.analysis import crossover, explain, prediction_check, regime_frame, spearman, verdict
from rlbench.analysis.speedup import speedup_frame
from rlbench.core.results import schema

PNG = b"\x89PNG\r\n\x1a\n"


# ---- the grid ---------------------------------------------------------------------------------

def _points(name: str, config=None) -> dict[str, dict]:
    """workload -> {cell suffix: RunConfig} of an ablation."""
    from rlbench.core.config_files import load_config
    from rlbench.run.ablation import cells_for

    out: dict[str, dict] = {}
    for cell, cfg in cells_for(name, load_config(config)):
        workload, suffix = cell.split("/")
        assert cfg.run.workload == workload
        out.setdefault(workload, {})[suffix] = cfg
    return out


@pytest.mark.parametrize("name,config", [("regime", None), ("regime-quick", TINY)])
def test_every_point_runs_the_ladder_on_the_same_config(name, config):
    points = _points(name, config)
    for workload, cells in points.items():
        assert list(cells) == ["sync", "periodic_async_barrier", "periodic_async"], workload
        assert [(c.engine.schedule, c.engine.overlap) for c in cells.values()] == \
            [("sync", True), ("periodic_async", False), ("periodic_async", True)]
        dumps = [c.model_dump(mode="json") for c in cells.values()]
        for d in dumps:  # the cells of a point differ in their switches only
            d["engine"].pop("schedule"), d["engine"].pop("overlap")
        assert dumps[0] == dumps[1] == dumps[2], workload
        sync = cells["sync"]
        assert sync.run.interleave  # a point's cells take turns by iteration: drift hits all three alike
        assert sync.rollout.max_num_seqs >= sync.batch_size  # every sample in flight
        assert sync.rollout.response_length == "lognormal" and sync.run.eval_every == 0


@pytest.mark.parametrize("name,config", [("regime", None), ("regime-quick", TINY)])
def test_interleaved_map_takes_turns_point_by_point(name, config):
    """The cells of one point (and seed) take turns together; the points run one after the other."""
    from rlbench.core.config_files import load_config
    from rlbench.run.ablation import cells_for, turn_groups

    cells = [(c, cfg, seed) for seed in (0, 1) for c, cfg in cells_for(name, load_config(config))]
    todo = [({"name": c}, (c, cfg, seed)) for c, cfg, seed in cells]
    groups = turn_groups(todo, shared_ring=False)
    assert len(groups) == 2 * len(_points(name, config))
    for group in groups:
        assert [e["name"].split("/")[1] for e, _ in group] == ["sync", "periodic_async_barrier", "periodic_async"]
        assert len({(cfg.run.workload, seed) for _, (_, cfg, seed) in group}) == 1
    assert turn_groups(todo, shared_ring=True) == [todo]  # check --against: one ring with the other tree
    plain = [({"name": c}, (c, cfg, 0)) for c, cfg in cells_for("async", load_config(config))]
    assert turn_groups(plain, shared_ring=False) == [plain]  # no workloads: every cell at once


@pytest.mark.parametrize("name,config", [("regime", None), ("regime-quick", TINY)])
def test_the_map_has_two_axes(name, config):
    syncs = [cells["sync"] for cells in _points(name, config).values()]
    tails = {(c.rollout.response_length_mean, c.rollout.response_length_sigma, c.rollout.max_new_tokens)
             for c in syncs}
    batches = {c.train.prompts_per_iteration for c in syncs}
    assert len(tails) >= 2 and len(batches) >= 2 and len(syncs) == len(tails) * len(batches)  # a full grid
    assert len({c.rollout.response_length_sigma for c in syncs}) >= 2  # the tail itself varies


def test_map_fits_the_model_and_the_quick_grid_is_quick():
    from rlbench.experiments.regime.cells import MAP as GRID
    from rlbench.experiments.regime.cells import POINTS, QUICK

    # prompt (about 80 tokens on the built-in task, 256 allowed) + response within the tiny model's 2048
    assert max(t.max_tokens for t in GRID.tails.values()) + 256 <= 2048
    assert QUICK.iterations <= 3 and max(t.max_tokens for t in QUICK.tails.values()) <= 128
    names = [w for points in POINTS.values() for w in points]
    assert len(names) == len(set(names))  # WORKLOADS holds every grid's points under one name each


def test_map_brackets_the_crossover_in_the_prediction_model():
    """The evidence the grid was chosen on: core/costmodel/predict.py's model (nothing fitted) on the lengths these
    seeds draw, at a decode step costing 6 trained tokens (what the regime runs of docs/results/regime.md imply): at least
    two points win by 5% or more and at least two lose. The measured map is the user's; this guards the grid."""
    from rlbench.core.costmodel.decode import StepCost
    from rlbench.core.costmodel.sync_measurements import SyncMeasurements
    from rlbench.engines.rollout.sampling import LengthSampling, target_length

    c_tok = 4e-4
    speedups = {}
    for workload, cells in _points("regime").items():
        cfg = cells["sync"]
        ro, ratios = cfg.rollout, []
        for k in range(cfg.run.warmup_iterations, cfg.run.iterations):
            sp = LengthSampling(n=ro.group_size, temperature=1.0, max_new_tokens=ro.max_new_tokens, seed=cfg.run.seed,
                                iteration=k, response_length="lognormal", response_length_mean=ro.response_length_mean,
                                response_length_sigma=ro.response_length_sigma)
            rows = [{"prompt": p, "sample": j, "prompt_len": 82, "response_len": target_length(sp, p, j)}
                    for p in range(cfg.train.prompts_per_iteration) for j in range(ro.group_size)]
            m = SyncMeasurements.stated(StepCost({}, 0.0, 0, fallback_s=6 * c_tok), c_tok, 1e-3, 1e-2,
                                        ro.max_num_seqs, ro.group_size, False, rows, ranks=2)
            ratios.append(m.sync_time()[0] / m.async_time(1, 1))
        speedups[workload] = statistics.median(ratios)
    assert sum(s >= 1.05 for s in speedups.values()) >= 2, speedups
    assert sum(s < 1.0 for s in speedups.values()) >= 2, speedups


# ---- crossover logic on hand-made maps -------------------------------------------------------

def frame(shares, measured, predicted=None, tails=None) -> pd.DataFrame:
    n = len(shares)
    return pd.DataFrame({"point": [f"p{i}" for i in range(n)], "rollout_share": shares,
                         "tail_ratio": tails or [1.0 + i for i in range(n)], "longest_response": [100.0] * n,
                         "measured_speedup": measured, "predicted_speedup": predicted or measured,
                         "error_pct": [0.0] * n})


def test_crossover_interpolates_between_the_last_loss_and_the_first_win():
    c = crossover(frame([0.4, 0.1, 0.3, 0.2], [1.3, 0.6, 1.2, 0.8]), "rollout_share")
    assert (c.kind, c.below, c.above, c.misclassified) == ("crossing", "p3", "p2", 0)
    assert c.x == pytest.approx(0.2 + (1.0 - 0.8) * 0.1 / (1.2 - 0.8))


def test_crossover_with_a_point_on_the_wrong_side():
    c = crossover(frame([0.1, 0.2, 0.3, 0.4, 0.5], [0.7, 1.1, 0.8, 1.2, 1.3]), "rollout_share")
    assert c.misclassified == 1 and c.kind == "crossing"
    # two cuts misclassify one point each (p2 or p1); of equals, the lowest is taken
    assert (c.below, c.above) == ("p0", "p1") and c.x == pytest.approx(0.1 + 0.3 * 0.1 / 0.4)


def test_crossover_everywhere_nowhere_and_too_few_points():
    assert crossover(frame([0.1, 0.2], [1.1, 1.2]), "rollout_share").kind == "everywhere"
    assert crossover(frame([0.1, 0.2], [0.9, 0.95]), "rollout_share").kind == "nowhere"
    assert crossover(frame([0.1], [1.2]), "rollout_share") is None


def test_explain_picks_the_statistic_that_separates_wins_from_losses():
    # rollout share puts a win below a loss; the tail ratio orders them cleanly
    f = frame([0.1, 0.2, 0.3, 0.4], [0.7, 1.2, 0.9, 1.3], tails=[1.0, 5.0, 2.0, 6.0])
    ranked = explain(f)
    assert ranked[0]["statistic"] == "tail_ratio" and ranked[0]["misclassified"] == 0
    assert next(e for e in ranked if e["statistic"] == "rollout_share")["misclassified"] == 1
    v = verdict(f)
    assert v.statistic == "tail_ratio" and 2.0 < v.measured.x < 5.0
    assert spearman(f["tail_ratio"], f["measured_speedup"]) == pytest.approx(1.0)


def test_prediction_check_counts_points_within_tolerance():
    f = frame([0.1, 0.2, 0.3], [1.0, 1.0, 1.0]).assign(error_pct=[3.0, -12.0, None])
    assert prediction_check(f) == {"points": 2, "within": 1, "tolerance_pct": 10.0, "worst_point": "p1",
                                   "worst_error_pct": -12.0}


# ---- the report of a hand-written map --------------------------------------------------------

@pytest.fixture(scope="module")
def regime_run(tmp_path_factory):
    root = make_regime(tmp_path_factory.mktemp("regime") / "map", MAP)
    build_report(root)
    return root


def test_regime_frame_matches_the_summary(regime_run):
    from rlbench.analysis.data import load

    run = load(regime_run)
    sp = speedup_frame(run)
    f = regime_frame(run, sp)
    assert list(f["point"]) == list(MAP) and f["barrier"].notna().all()
    summary = pd.read_csv(regime_run / "summary.csv").set_index("cell")["speedup"]
    for r in f.to_dict("records"):  # the typical paired ratio (the interval's centre) near the medians' ratio
        assert r["measured_low"] <= r["measured_speedup"] <= r["measured_high"]
        assert r["measured_speedup"] == pytest.approx(summary[r["async"]], rel=0.01)
        assert r["split_measured"] == pytest.approx(summary[r["barrier"]], rel=0.01)
        assert r["overlap_measured"] == pytest.approx(r["measured_speedup"] / r["split_measured"])
        assert r["measured_min"] <= r["measured_speedup"] * 1.0001 and r["measured_max"] >= r["measured_speedup"] * 0.9999
        assert r["prompts"] == MAP[r["point"]][2] and r["response_length"] == "lognormal"
    tailed = f[f["point"].str.startswith("tail")]
    assert (tailed["measured_speedup"] > 1).all() and (f[~f.index.isin(tailed.index)]["measured_speedup"] < 1).all()
    assert tailed["tail_ratio"].min() > f["tail_ratio"].max() / 2  # the 120-token response stands out
    saved = pd.read_csv(regime_run / "regime.csv")
    assert list(saved["point"]) == list(MAP)


def test_regime_headline_in_the_report(regime_run):
    html = (regime_run / "report.html").read_text()
    assert html.index("Where periodic asynchrony pays") < html.index("<h2>Summary")
    assert html.count("Periodic asynchrony pays here when") == 1
    assert (regime_run / "plots" / "regime.png").read_bytes()[:8] == PNG
    assert "Where periodic asynchrony pays" in (regime_run / "summary.md").read_text()


def test_terminal_says_one_sentence_per_point_and_the_crossover(regime_run):
    text = summary_table_text(regime_run, wide=True)
    head = text[text.index("Regime map"):]
    for point, (tail, _, _) in MAP.items():
        line = next(ln for ln in head.splitlines() if ln.startswith(point + " ("))
        assert ("periodic asynchrony wins" if tail else "periodic asynchrony loses") in line
        assert "device split alone" in line and "predicted" in line
    cross = next(ln for ln in head.splitlines() if ln.startswith("Periodic asynchrony pays here when"))
    share = float(cross.split("more than ")[1].split("%")[0])
    shares = pd.read_csv(regime_run / "regime.csv").set_index("point")["rollout_share"] * 100
    assert shares[["flat-p8", "flat-p16"]].max() <= share <= shares[["tail-p8", "tail-p16"]].min()
    assert "vs flat-p8/sync" not in text  # the point sentences replace the per-cell attribution


def test_verdict_says_each_point_and_what_would_change_the_answer(regime_run):
    """The default terminal: a short verdict per point, then the crossover as the condition that would
    change the answer, all within 100 columns."""
    text = summary_table_text(regime_run)
    verdict = " ".join(line.strip() for line in text.split("\n\n")[0].splitlines()[1:])
    for point, (tail, _, _) in MAP.items():
        assert f"{point}/periodic_async " in verdict
        assert f"{point}/sync's TPSPD" in verdict.split(f"{point}/periodic_async ")[1].split("here")[0]
    assert verdict.count("wins here") == 2 and verdict.count("loses here") == 2
    assert "On this machine it pays when sync spends more than about " in verdict
    assert "Regime map" not in text and max(map(len, text.splitlines())) <= 100


def test_a_single_comparison_has_no_map(tmp_path):
    run = make_ablation(tmp_path / "abl")
    html = build_report(run).read_text()
    assert not (run / "regime.csv").exists() and not (run / "plots" / "regime.png").exists()
    assert "Where periodic asynchrony pays" not in html and "Regime map" not in summary_table_text(run)


# ---- a real quick map -------------------------------------------------------------------------

# Two of regime-quick's four points, the corners of its grid (light tail at 2 prompts, heavy tail at 4): the
# map end to end (its cells, regime.csv, the report's sentences) in half the cells. A cell's start-up, ~10 s
# of a quiet 2-core machine, is most of its time; the grid's full shape is tested above, on its configs.
QUICK_POINTS = ("toy-light-p2", "toy-heavy-p4")
ONLY_QUICK_POINTS = ("import rlbench.run.ablation_table as a; a.ABLATIONS['regime-quick'] = "
                     f"[c for c in a.ABLATIONS['regime-quick'] if c[1]['workload'] in {QUICK_POINTS!r}]")


@pytest.mark.e2e
def test_quick_map_through_the_cli(tmp_path):
    """`rlbench run --ablation regime-quick` on the tiny config, two of its points x 3 cells: the report's map."""
    proc = rlbench("run", "--config", TINY, "--ablation", "regime-quick", "--out", tmp_path, "--no-progress",
                   prelude=ONLY_QUICK_POINTS, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(tmp_path)
    abl = json.loads((run_dir / schema.ABLATION).read_text())
    assert [c["name"] for c in abl["cells"]] == [f"{p}/{c}" for p in QUICK_POINTS
                                                 for c in ("sync", "periodic_async_barrier", "periodic_async")]
    assert all(c["exit_code"] == 0 for c in abl["cells"])
    f = pd.read_csv(run_dir / "regime.csv")
    assert list(f["point"]) == list(QUICK_POINTS)
    assert f["barrier"].notna().all() and f["predicted_speedup"].notna().all()
    for point in f["point"]:  # the three cells of a point generate the same lengths
        lengths = [sorted((s["iteration"], s["prompt"], s["sample"], s["response_len"])
                          for s in schema.load_samples(run_dir / f"{point}--{c}"))
                   for c in ("sync", "periodic_async_barrier", "periodic_async")]
        assert lengths[0] == lengths[1] == lengths[2]
    heavy, light = f[f["point"].str.contains("heavy")], f[f["point"].str.contains("light")]
    assert heavy["longest_response"].min() > light["longest_response"].max()
    verdict = " ".join(proc.stdout.split("\n\n")[0].split())  # the verdict block, its lines unwrapped
    assert sum(verdict.count(w) for w in ("wins here", "loses here", "even here", "too few iterations to call")) >= 2
    assert "On this machine it pays " in verdict and (run_dir / "plots" / "regime.png").is_file()


def test_report_add_puts_a_natural_tail_on_the_map(tmp_path):
    """`rlbench report MAP --add NATURAL`: the other run's point joins the map, its EOS-ended lengths
    beside the drawn ones; the outputs go into MAP's folder."""
    base = make_regime(tmp_path / "map", {k: MAP[k] for k in ("flat-p8", "tail-p8")})
    natural = make_regime(tmp_path / "natural", {"smollm2-eos": (True, 0.9, 4)})
    for folder in natural.iterdir():
        if (folder / schema.RESULTS).is_file():
            res = json.loads((folder / schema.RESULTS).read_text())
            res["config"]["rollout"]["response_length"] = "eos"
            schema.atomic_write_json(folder / schema.RESULTS, res)
    proc = rlbench("report", base, "--add", natural, "--wide", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "smollm2-eos (EOS-ended responses (max 128 tokens)" in proc.stdout  # --wide: the map's sentences
    assert "smollm2-eos/periodic_async " in proc.stdout.split("\n\n")[0]  # the verdict: every point
    f = pd.read_csv(base / "regime.csv")
    assert list(f["point"]) == ["flat-p8", "tail-p8", "smollm2-eos"]
    lengths = pd.read_csv(base / "regime_lengths.csv").set_index("tail")
    assert lengths.loc["EOS, max 128", "points"] == "smollm2-eos" and lengths.loc["EOS, max 128", "max"] == 120
    assert (base / "plots" / "regime_lengths.png").read_bytes()[:8] == PNG
    assert not (natural / "regime.csv").exists()
    clash = rlbench("report", base, "--add", base, timeout=300)
    assert clash.returncode == 2 and "already in the report" in clash.stderr


def test_cells_without_workloads_make_no_map(tmp_path):
    """An ablation of switches (two periodic-async cells, no workloads) is not a map of two points."""
    run = make_ablation(tmp_path / "abl", names=("sync", "periodic_async"))
    from support.report_runs import make_cell

    make_cell(run / "periodic_async+tri_model", "periodic_async+tri_model", "periodic_async")
    abl = json.loads((run / schema.ABLATION).read_text())
    abl["cells"].append({"name": "periodic_async+tri_model", "dir": "periodic_async+tri_model",
                         "switches": {"schedule": "periodic_async"}, "exit_code": 0})
    schema.atomic_write_json(run / schema.ABLATION, abl)
    from rlbench.analysis.data import load

    loaded = load(run)
    assert len(speedup_frame(loaded)) == 2 and len(regime_frame(loaded, speedup_frame(loaded))) == 0
    assert "Regime map" not in summary_table_text(run)


def test_set_changes_a_point_but_not_what_its_cells_differ_in():
    """--set lands on top of a workload (a first look at fewer iterations), never on the cell switches."""
    from rlbench.core.config_files import load_config, parse_overrides
    from rlbench.run.ablation import cells_for

    sets = ["run.iterations=4", "run.warmup_iterations=1", "engine.overlap=false", "rollout.max_new_tokens=200"]
    cells = cells_for("regime", load_config(None, sets), parse_overrides(sets))
    assert {c.run.iterations for _, c in cells} == {4} and {c.rollout.max_new_tokens for _, c in cells} == {200}
    assert [c.engine.overlap for _, c in cells[:3]] == [True, False, True]
    assert {c.rollout.response_length_sigma for _, c in cells} == {0.5, 1.0, 1.5, 2.0}  # the rest of each point stays
