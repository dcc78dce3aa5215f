"""An experiment is one folder (bench/experiments/<name>/: its record, cells, analysis, report section and a
README) and one line of the registry (bench/experiments/__init__.py): `--ablation`, `rlbench run --help` and every
report read the records, and no other module names an experiment, by import or by string."""
import ast
import re

import pytest
import importlib
import sys

from rlbench import experiments
from rlbench.core.experiments.spec import Analysis, ExperimentSpec, Report, Runner

from conftest import ROOT
FOLDER = ROOT / "bench" / "experiments"
SOURCES = ("bench", "core", "engines", "analysis", "reports")
REGISTRY = "bench/experiments/__init__.py"
# Where a string that is also an experiment's (or its ablation's) name means something else.
OTHER_MEANING = {
    ("bench/check/tiers.py", "families"): "the schedules tier of `rlbench check` runs that ablation, and "
                                          "reruns when the ladder's cells change",
    # "verl" is the peer engine's name (`--engine verl`, its cells, its venv's package) and the name of the
    # peers ablation that runs it beside rlbench's schedules (`--ablation verl`)
    **{(path, "peers"): "the engine's name, verl" for path in (
        "engines/external/__init__.py", "engines/external/verl/adapter.py",
        "engines/external/verl/cost_settings.py", "engines/external/verl/metrics.py",
        "engines/external/verl/venv.py", "bench/check/env_ab.py")},
}


def _own(path: str, name: str) -> bool:
    """The modules that may name experiment `name`: its folder and the registry."""
    return path.startswith(f"bench/experiments/{name}/") or path == REGISTRY


def _docstrings(tree) -> set[int]:
    return {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


def names_of(spec: ExperimentSpec) -> dict[str, str]:
    """What names the experiment: its module path, its folder and each ablation's name -> the experiment."""
    return {f"rlbench.experiments.{spec.name}": spec.name, f"bench/experiments/{spec.name}": spec.name,
            **{ablation: spec.name for ablation in spec.cells()}}


def mentions(source: str, names: dict[str, str]) -> list[tuple[int, str]]:
    """(line, experiment) for every import of an experiment's module, and every string in code (docstrings and
    comments are for people) that is one of its ablation names or holds its module path or folder."""
    tree = ast.parse(source)
    docs, out = _docstrings(tree), []
    paths = {n: e for n, e in names.items() if "." in n or "/" in n}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            out += [(node.lineno, e) for m in modules for p, e in paths.items()
                    if m == p or m.startswith(p + ".")][:1]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            if text in names and text not in paths:
                out.append((node.lineno, names[text]))
            out += [(node.lineno, e) for p, e in paths.items() if re.search(rf"{re.escape(p)}(?![\w-])", text)]
    return sorted(set(out))


def _all_names() -> dict[str, str]:
    return {n: e for spec in experiments.EXPERIMENTS.values() for n, e in names_of(spec).items()}


def test_every_experiment_is_a_registered_folder():
    registered = set(experiments.EXPERIMENTS)
    folders = {p.name for p in FOLDER.iterdir() if (p / "__init__.py").is_file()}
    assert {"regime", "families", "peers"} <= registered and registered == folders
    for name, spec in experiments.EXPERIMENTS.items():
        assert getattr(experiments, name).EXPERIMENT is spec and isinstance(spec, ExperimentSpec)


@pytest.mark.parametrize("name", ["regime", "families", "peers"])
def test_a_folder_holds_its_readme_cells_analysis_and_report(name):
    spec, folder = experiments.EXPERIMENTS[name], FOLDER / name
    readme = (folder / "README.md").read_text()
    assert readme.startswith(f"# {name}") and "`__init__.py`" in readme and "`cells.py`" in readme
    cells = spec.cells()
    assert cells and set(cells) == set(spec.about)  # every ablation it adds is described in --help
    assert all(len(c) >= 2 and all(isinstance(sw, dict) for _, sw in c) for c in cells.values())
    for load, module in ((spec.load_analysis, "analysis"), (spec.load_report, "report")):
        assert load() is importlib.import_module(f"rlbench.experiments.{name}.{module}").__dict__[module.upper()]
    if spec.runner:  # its own folder's code
        runner = spec.load_runner()
        assert any(m.startswith(f"rlbench.experiments.{name}.") and getattr(mod, "RUNNER", None) is runner
                   for m, mod in list(sys.modules.items()))
    assert isinstance(spec.load_analysis(), Analysis) and isinstance(spec.load_report(), Report)
    assert isinstance(spec.load_runner(), Runner)
    assert (folder / "cells.py").is_file() and (folder / "analysis.py").is_file() and (folder / "report.py").is_file()


def test_the_ablations_are_the_records_cells():
    """`--ablation NAME` runs what the record says, and `rlbench run --help` lists it."""
    from rlbench.run.ablation_table import ABLATIONS, help_text

    for spec in experiments.EXPERIMENTS.values():
        for ablation, cells in spec.cells().items():
            assert ABLATIONS[ablation] == cells and f"{ablation} ({spec.about[ablation]}" in help_text()


def test_no_other_module_names_an_experiment():
    names, found, excused = _all_names(), [], set()
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, name in mentions(path.read_text(), names):
                if not _own(rel, name) and (rel, name) in OTHER_MEANING:
                    excused.add((rel, name))
                elif not _own(rel, name):
                    found.append(f"{rel}:{line}: {name}")
    assert not found, "experiments named outside their folder (read the registry instead):\n" + "\n".join(found)
    assert excused == set(OTHER_MEANING), "stale entries: " + str(set(OTHER_MEANING) - excused)


def test_no_experiment_imports_another():
    names = _all_names()
    for spec in experiments.EXPERIMENTS.values():
        for path in sorted((FOLDER / spec.name).rglob("*.py")):
            others = {e for _, e in mentions(path.read_text(), names)} - {spec.name}
            assert not others, (path, others)


def test_the_scan_sees_an_experiment():
    """The checks above can fail: each way of naming an experiment is caught, prose is not."""
    names = {"rlbench.experiments.regime": "regime", "bench/experiments/regime": "regime", "regime": "regime",
             "regime-quick": "regime"}
    code = ('"""the regime map in a docstring."""\nfrom rlbench.experiments.regime import cells\n'
            'import rlbench.experiments.regime.analysis\nx = {"regime-quick": 1}\n'
            'y = "rlbench.experiments.regime.report:REPORT"\nz = "bench/experiments/regime/cells.py"\n'
            'w = "a regime map"\nv = "regime.csv"\nu = "regime"\n')
    assert mentions(code, names) == [(2, "regime"), (3, "regime"), (4, "regime"), (5, "regime"), (6, "regime"),
                                     (9, "regime")]
