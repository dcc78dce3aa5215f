"""The layers are the folders, and imports point down only:

    core/      core       config, errors, registries, the timer, result schema, devices, cost model
    bench/planted/   hooks      test hooks: register at the core's hook points, import the core only
    engines/         engines    data, model, rollout, trainer, schedules, hosts, external adapters
    analysis/  analysis   conclusions computed from result files (intervals, crossover, seeds, ladder)
    reports/         reports    render tables, plots and HTML from result files and analysis output
    bench/experiments/ experiments  one folder per experiment: its cells, analysis and report section
    bench/ (the rest) harness   cli, run, check, simulate: may use every layer

The core imports no other layer (its registries name engine builders, and its hook points the test hooks,
by string, imported only when a component is built or a test hook is asked for); engines import the core
only, and no other engine's internals; analysis imports the core only; reports the core and analysis;
an experiment every layer but the hooks and the harness (the core's experiment registry names each record by
string, and the records their analysis and report, so analysis and reports reach an experiment only
through the registry); no private names across modules; no cycles. Read from the source (every `import`, lazy ones inside
functions included, and imports by name: a `module:attribute` string), so a violation fails here even when
no test happens to execute the import. A module's layer comes from its folder: nothing is listed by module.
"""
import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT
# One rule from import path to folder: rlbench.X is the top-level folder X/ where there is one (the layers
# core, engines, analysis, reports), else bench/X (experiments, the test hooks and the harness).
FOLDERS = {"bench": "rlbench", "core": "rlbench.core", "engines": "rlbench.engines",
           "analysis": "rlbench.analysis", "reports": "rlbench.reports"}
# The layer of a folder (relative to the tree); every other module under bench/ is the harness.
LAYERS = {"core": "core", "bench/planted": "hooks", "analysis": "analysis", "engines": "engines",
          "reports": "reports", "bench/experiments": "experiments"}
BELOW = {"core": {"core"}, "hooks": {"core", "hooks"}, "engines": {"core", "engines"},
         "analysis": {"core", "analysis"}, "reports": {"core", "analysis", "reports"},
         "experiments": {"core", "engines", "analysis", "reports", "experiments"},
         "harness": {"core", "hooks", "engines", "analysis", "reports", "experiments", "harness"}}
# What the core names by string: engine builders (the registries), the test hooks (the hook points) and the
# experiments' records (their registry).
BY_NAME_FROM_CORE = {"rlbench.core.components": "engines", "rlbench.core.schedules": "engines",
                     "rlbench.core.hooks": "hooks", "rlbench.core.experiments": "experiments"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


MODULES = _modules()


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_of(path: Path) -> str:
    """The layer of a source file, from its folder."""
    rel = path.resolve().relative_to(ROOT).as_posix()
    return next((layer for folder, layer in LAYERS.items() if rel.startswith(folder + "/")), "harness")


LAYER = {m: layer_of(p) for m, p in MODULES.items()}
CORE_MODULES = {m for m, layer in LAYER.items() if layer == "core"}


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, imported name or None) for every rlbench import in the file, by statement or by name."""
    return [(m, n) for m, n, _ in _imports_how(path)]


def _imports_how(path: Path) -> list[tuple[str, str | None, bool]]:
    """(module, name or None, by_name) for every rlbench import; by_name: a "module:attribute" string."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlbench"):
            out += [(node.module, a.name, False) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None, False) for a in node.names if a.name.startswith("rlbench")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"rlbench(\.\w+)+:\w+", node.value):
            module = node.value.split(":")[0]
            if module in MODULES:
                out.append((module, None, True))
    return out


def _target(module: str, name: str | None) -> str:
    """`from rlbench.x import y` names module rlbench.x.y when that is a module, else rlbench.x."""
    return f"{module}.{name}" if name and f"{module}.{name}" in MODULES else module


GRAPH = {m: {_target(mod, name) for mod, name in _imports(p)} for m, p in MODULES.items()}
BY_NAME = {m: {mod for mod, _, by_name in _imports_how(p) if by_name} for m, p in MODULES.items()}


def test_the_graph_is_read():
    assert "rlbench.engines.factory" in GRAPH["rlbench.run.cell"]
    assert {"rlbench.core.config", "rlbench.engines.trainer.trainer"} <= MODULES.keys()


def test_the_layers_are_the_folders():
    assert LAYER["rlbench.core.config"] == LAYER["rlbench.core.record.stages"] == "core"
    assert LAYER["rlbench.planted.slowdown"] == "hooks" and LAYER["rlbench.engines.factory"] == "engines"
    assert LAYER["rlbench.reports.html"] == "reports" and LAYER["rlbench.cli"] == LAYER["rlbench.run.cell"] == "harness"
    assert LAYER["rlbench.experiments.regime.analysis"] == "experiments"
    assert layer_of(ROOT / "bench" / "newpackage" / "thing.py") == "harness"
    assert layer_of(ROOT / "core" / "new.py") == "core"


def test_one_rule_maps_an_import_path_to_its_folder():
    """rlbench.X.Y is X/Y.py (or X/Y/) where X/ is a top-level folder of the tree, else bench/X/Y.py: a reader
    (or an editor mapping imports to folders) finds every module from its import path alone."""
    def folder_of(module: str) -> Path:
        parts = module.split(".")[1:]
        top = parts[0] if parts and (ROOT / parts[0] / "__init__.py").is_file() else None
        base = ROOT / top if top else ROOT / "bench"
        rest = parts[1:] if top else parts
        return base.joinpath(*rest)
    for module, path in MODULES.items():
        want = folder_of(module)
        assert path in (want.with_suffix(".py"), want / "__init__.py"), (module, path)
    assert folder_of("rlbench.core.config").with_suffix(".py") == ROOT / "core" / "config.py"
    assert folder_of("rlbench.run.cell").with_suffix(".py") == ROOT / "bench" / "run" / "cell.py"


def test_imports_by_name_are_seen():
    """The schedule registry loads its records by name, and the records name their engines and cost terms."""
    assert "rlbench.engines.schedules.sync" in GRAPH["rlbench.core.schedules"]
    assert {"rlbench.engines.schedules.sync.engine", "rlbench.engines.schedules.sync.cost"} <= \
        BY_NAME["rlbench.engines.schedules.sync"]
    assert "rlbench.reports.build" in BY_NAME["rlbench.reports"]  # the reports' lazy names


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    """Every import stays in the module's layer or below it; the core names other layers by string only
    where it is a registry (engine builders) or the hook points (the test hooks)."""
    by_name = {d for d in BY_NAME[module] if LAYER.get(d) == BY_NAME_FROM_CORE.get(module)}
    bad = sorted(d for d in GRAPH[module] - by_name if d in LAYER and LAYER[d] not in BELOW[LAYER[module]])
    assert not bad, f"{module} ({LAYER[module]}) imports {[(d, LAYER[d]) for d in bad]}"


def test_the_trainer_uses_only_the_rollout_interface():
    allowed = {"rlbench.engines.rollout", "rlbench.engines.rollout.base"}
    bad = {m: sorted(d for d in deps if _under(d, ["rlbench.engines.rollout"]) and d not in allowed)
           for m, deps in GRAPH.items() if m.startswith("rlbench.engines.trainer")}
    assert not {m: d for m, d in bad.items() if d}


def test_rollout_knows_neither_schedules_nor_trainer():
    bad = {m: sorted(d for d in deps if _under(d, ["rlbench.engines.schedules", "rlbench.engines.trainer"]))
           for m, deps in GRAPH.items() if m.startswith("rlbench.engines.rollout")}
    assert not {m: d for m, d in bad.items() if d}


def test_a_schedule_is_one_folder():
    """Each schedule's code is its folder (engines/schedules/<name>/); folders share only the protocols
    (common.py) and the options several of them read (options.py). A schedule that reuses another's engine
    or cost term names it by string in its record (one_step_off: bounded_async's, k pinned to 1)."""
    folders = {p.name for p in (ROOT / "engines" / "schedules").iterdir() if (p / "__init__.py").is_file()}
    assert {"sync", "periodic_async", "bounded_async", "one_step_off"} <= folders
    shared = {"rlbench.engines.schedules.common", "rlbench.engines.schedules.options"}
    for m in (m for m in GRAPH if m.startswith("rlbench.engines.schedules.")):
        own = "rlbench.engines.schedules." + m.split(".")[3]
        static = GRAPH[m] - BY_NAME[m]
        bad = sorted(d for d in static if _under(d, ["rlbench.engines.schedules"]) and d not in shared
                     and not _under(d, [own]))
        assert not bad, (m, bad)


def test_every_schedule_folder_has_its_page():
    """A schedule's page is the README.md beside its code (what it does, its record, where its code is)."""
    folders = [p for p in (ROOT / "engines" / "schedules").iterdir() if (p / "__init__.py").is_file()]
    assert folders and not [p.name for p in folders if not (p / "README.md").is_file()]


def test_no_private_names_imported_from_another_module():
    bad = [(m, f"{mod}.{name}") for m, p in MODULES.items() for mod, name in _imports(p)
           if name and name.startswith("_") and not name.startswith("__")]
    assert not bad


def test_no_import_cycles():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(GRAPH.get(m, ()) - {b for b in BY_NAME.get(m, ()) if _under(b, ["rlbench.engines"])}):
            if d not in GRAPH or d == m:
                continue
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (cycle := visit(d, path + [d])):
                return cycle
        state[m] = 2
        return None

    for m in sorted(GRAPH):
        if m not in state:  # (a registry's builder names are followed only when a component is built)
            assert (cycle := visit(m, [m])) is None, " -> ".join(cycle)


def computing(source: str) -> list[str]:
    """What in source computes rather than renders: a table written (`.to_csv`, the analysis writes summary.csv
    and its siblings) or a statistic imported (statistics, scipy, collections.Counter)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "to_csv":
            found.append(f"{node.lineno}: .to_csv")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            names = {a.name for a in node.names}
            if any(m.split(".")[0] in ("statistics", "scipy") for m in mods) or "Counter" in names:
                found.append(f"{node.lineno}: import {', '.join(mods)}")
    return found


def test_reports_only_render():
    """reports/ computes nothing (docs/architecture/layers.md): the tables and statistics are the analysis's."""
    bad = [f"{p.relative_to(ROOT)}:{x}" for p in sorted((ROOT / "reports").rglob("*.py")) for x in computing(p.read_text())]
    assert not bad
    assert computing("import statistics\ndef f(df, p):\n    df.to_csv(p)\n") == ["1: import statistics", "3: .to_csv"]


def test_a_planted_violation_is_caught(tmp_path):
    """The rules above are not vacuous: a core module importing the runner breaks the first one."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from rlbench.run.cell import run_cell\n    from rlbench.engines.rollout import _x\n")
    found = {_target(mod, name) for mod, name in _imports(path)}
    assert "rlbench.run.cell" in found and not found <= CORE_MODULES
