"""A schedule is a record (core/schedules/<name>.py: what it is, its options, its cost model), one line of
the registry (SCHEDULES) and an engine folder (engines/schedules/<name>/, one line of ENGINES); a rollout
backend one record and its module: no other module names one, and a schedule added that way
(one_step_off) is a whole schedule everywhere."""
import ast
import json
import re

import pytest
from rlbench.core import schedules
from rlbench.core.schedules.spec import DECOUPLED, MODEL_BOUNDED, POOLS, ScheduleSpec

from conftest import ROOT
TINY = ROOT / "configs" / "cpu-tiny.yaml"
SOURCES = ("bench", "core", "engines", "analysis", "reports")
# Where a word that is also a schedule's name means something else.
OTHER_MEANING = {
    ("engines/rollout/pool.py", "sync"): "the rollout worker's weight-sync message",
    ("bench/experiments/regime/analysis.py", "sync"): "the regime table's column of each point's reference cell",
    ("analysis/speedup.py", "sync"): "the attribution table's column of the reference cell",
    ("reports/tables.py", "sync"): "the attribution sentence reads that column",
    ("core/costmodel/predict.py", "sync"): "result keys of the reference cell's measurement (sync_iter_s, ...)",
    ("bench/simulate/paper.py", "sync"): "simulate.json keys of the reference's prediction (sync_tpspd, ...)",
    ("bench/plan/verl_metrics.py", "sync"): "VERL's own metric key timing_s/sync_weights",
    ("engines/external/verl/recipes.py", "sync"): "VERL's trainer mode (trainer.v1.trainer_mode=sync), a recipe's name",
    ("engines/external/verl/recipes.py", "one_step_off"): "VERL's recipe (verl/experimental/one_step_off_policy)",
    ("engines/external/verl/adapter.py", "sync"): "VERL's recipe of the cell: its synchronous trainer",
    ("engines/external/verl/cpu/patches.py", "one_step_off"): "the path of VERL's one-step-off recipe",
    ("bench/experiments/peers/cells.py", "one_step_off"): "the VERL cell's recipe option, VERL's name",
    ("engines/external/verl/metrics.py", "one_step_off"): "VERL's recipe, whose samples are one step late",
}


# Where a word that is also a rollout backend's name means something else.
OTHER_BACKEND_MEANING = {
    ("core/config_inputs.py", "builtin"): "data.source: the built-in task",
    ("engines/data/source.py", "builtin"): "data.source: the built-in task",
    ("core/results/provenance.py", "vllm"): "the vllm package's version",
    ("engines/external/verl/command.py", "vllm"): "VERL's own rollout engine setting",
    ("engines/external/verl/cpu/patches.py", "vllm"): "the distribution names of vLLM and of its CPU build",
    ("engines/external/verl/venv.py", "vllm"): "the package names whose versions VERL's venv reports",
    ("engines/external/mindspeed.py", "vllm"): "MindSpeed-RL's own rollout engine setting",
}


def _own(path: str, name: str) -> bool:
    """The modules that may name schedule `name`: its record and its engine's folder."""
    return path == f"core/schedules/{name}.py" or path.startswith(f"engines/schedules/{name}/")


def _own_backend(path: str, name: str) -> bool:
    """The modules that may name backend `name`: the registry (its record) and its module."""
    return path == "core/components.py" or (name == "vllm" and path == "engines/rollout/vllm_backend.py")


def _docstrings(tree) -> set[int]:
    return {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


def mentions(source: str, names) -> list[tuple[int, str]]:
    """(line, name) for every schedule name in code: a string constant without whitespace (a key, a value,
    a cell name; prose and docstrings are for people) holding it as a word, or an attribute spelt as it or
    as its enum member (`Schedule.SYNC`, `cfg.engine.sync`). Import paths (`rlbench.engines.schedules.x:build`) are not
    names."""
    tree = ast.parse(source)
    docs, out = _docstrings(tree), []
    words = {n: re.compile(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9])") for n in names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            if re.search(r"\s", text) or text.startswith("rlbench."):
                continue
            out += [(node.lineno, n) for n, w in words.items() if w.search(text)]
        if isinstance(node, ast.Attribute):
            out += [(node.lineno, n) for n in names if node.attr in (n, n.upper())]
    return sorted(out)


def _scan(names, own, other_meaning) -> None:
    found, excused = [], set()
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, name in mentions(path.read_text(), names):
                if (rel, name) in other_meaning:
                    excused.add((rel, name))
                elif not own(rel, name):
                    found.append(f"{rel}:{line}: {name}")
    assert not found, "names outside their own module (read the record instead):\n" + "\n".join(found)
    assert excused == set(other_meaning), "stale entries: " + str(set(other_meaning) - excused)


def test_no_other_module_names_a_schedule():
    _scan(schedules.SCHEDULES, _own, OTHER_MEANING)


def test_no_other_module_names_a_rollout_backend():
    from rlbench.core.components import BACKENDS

    _scan(BACKENDS, _own_backend, OTHER_BACKEND_MEANING)


def test_the_scan_sees_a_name():
    """The check above can fail: each way of naming a schedule is caught, prose is not."""
    names = ["sync", "periodic_async"]
    code = ('"""sync in a docstring."""\nx = {"schedule": "periodic_async"}\ny = "periodic_async_barrier"\n'
            'z = Schedule.SYNC\nw = "weight_sync"\nv = "a sync message"\nu = "rlbench.engines.schedules.sync:build"\n')
    assert mentions(code, names) == [(2, "periodic_async"), (3, "periodic_async"), (4, "sync")]


def test_one_step_off_is_bounded_staleness_one():
    from rlbench.core.config import RunConfig
    from rlbench.core.config_files import with_overrides
    from rlbench.core.devices.placement import plan
    from rlbench.engines.trainer.grpo import DecoupledPPOLoss, make_loss
    from rlbench.simulate import simulate
    from rlbench.simulate.paper import paper_batches

    spec = schedules.SCHEDULES["one_step_off"]
    assert (spec.layout, spec.loss, spec.model, spec.runs_ahead) == (POOLS, DECOUPLED, MODEL_BOUNDED, True)
    cfg = with_overrides(RunConfig(), {"engine": {"schedule": "one_step_off"}})
    assert spec.staleness(cfg) == 1 and cfg.switches()["max_staleness"] == 1  # pinned
    assert isinstance(make_loss(cfg), DecoupledPPOLoss)
    assert [s.role for s in plan(cfg.engine, "cpu", 2).slots] == ["rollout", "trainer"]
    with pytest.raises(Exception, match="one-step-off is k=1"):
        with_overrides(RunConfig(), {"engine": {"schedule": "one_step_off", "max_staleness": 2}})
    batches = paper_batches()[:4]
    assert simulate(batches, "one_step_off", 2, 2, staleness=3).tpspd == \
        simulate(batches, "bounded_async", 2, 2, staleness=1).tpspd


def test_a_records_cells_join_the_ablations_it_names():
    from rlbench.core.components import Options
    from rlbench.run.ablation_table import add_schedule_cells

    spec = ScheduleSpec(name="extra", summary="", options=Options, layout=POOLS,
                        model=MODEL_BOUNDED, cells={"staleness": (("extra_k1", {"max_staleness": 1}),)})
    table = add_schedule_cells({"staleness": [("a", {})]}, [spec])
    assert table["staleness"] == [("a", {}), ("extra_k1", {"schedule": "extra", "max_staleness": 1})]


@pytest.mark.e2e
def test_one_step_off_cell_through_cli(families_run):
    """The new schedule as a user runs it (its rung of conftest.py's `--ablation families` run): complete,
    every sample at most one version stale."""
    _, run_dir = families_run
    (folder,) = [p for p in run_dir.iterdir() if (p / "results.json").is_file()
                 and json.loads((p / "results.json").read_text())["switches"]["schedule"] == "one_step_off"]
    res = json.loads((folder / "results.json").read_text())
    assert res["status"] == "complete" and res["switches"]["max_staleness"] == 1
    samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    stale = [s["trained_version"] - s["behaviour_version"] for s in samples]
    assert stale and all(0 <= s <= 1 for s in stale)


def test_ablation_help_is_made_from_the_registry():
    from rlbench.run.ablation_table import ABLATIONS, help_text

    text = help_text()
    assert all(f"{name} (" in text for name in ABLATIONS) and "regime" in text and "staleness" in text


def test_reported_metrics_come_from_one_table():
    """The summary's columns, compare's key metrics and the seed spreads are the metric table's rows."""
    from rlbench.analysis.comparison import KEY_METRICS
    from rlbench.analysis.seeds import EXTREMES, SPREAD
    from rlbench.analysis.summary import BASE_COLUMNS, TAIL_COLUMNS
    from rlbench.core.results import metric_table

    summary = [c for c in BASE_COLUMNS + TAIL_COLUMNS if c in {m.name for m in metric_table.METRICS}]
    assert summary == metric_table.names(metric_table.SUMMARY)
    assert KEY_METRICS == metric_table.names(metric_table.COMPARE) and "tpspd_median" in KEY_METRICS
    assert SPREAD == metric_table.names(metric_table.SPREAD) and EXTREMES["staleness_max"] == "max"
