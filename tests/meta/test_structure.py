"""The layers are the folders, and imports point down only:

    core/      core       config, errors, registries, the timer, result schema, devices, cost model
    bench/planted/   hooks      test hooks: register at the core's hook points, import the core only
    engines/         engines    data, model, rollout, trainer, schedules, hosts, external adapters
    analysis/  analysis   conclusions computed from result files (intervals, crossover, seeds, ladder)
    reports/         reports    render tables, plots and HTML from result files and analysis output
    bench/experiments/ experiments  one folder per experiment: its cells, analysis and report section
    bench/ (the rest) harness   cli, run, check, simulate: may use every layer

The core imports no other layer; engines import the core only, and no other engine's internals; analysis
imports the core only; reports the core and analysis; an experiment every layer but the hooks and the
harness. A registry is a module of the layer that owns its entries and lists them by import: the schedule
records, the rollout backends and the packed-group implementations are the core's (core/schedules/,
core/components.py), their code the engines' (engines/schedules/__init__.py, engines/rollout/backends.py,
engines/trainer/logprob_plans.py, found by the record's name); the experiments' registry is theirs
(bench/experiments/__init__.py), and analysis and reports are given the records by the harness. No private
names across modules; no cycles. Read from the source (every `import`, lazy ones inside functions included,
and imports by name: a `module:attribute` string, an edge like any import for the layers and the cycles), so
a violation fails here even when no test happens to execute the import. At most MAX_BY_NAME such strings
remain, each with its reason in a comment on its line; the one that names an upper layer (the core's hook
points naming the test hooks) is listed in BY_NAME_UPWARD with that reason. A module's layer comes from its
folder: nothing is listed by module.
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
MAX_BY_NAME = 5  # "module:attribute" strings left in the tree, each with its reason
# The names by string that point up a layer, each with its reason: (module, what it names) -> why.
BY_NAME_UPWARD = {("rlbench.core.hooks", "rlbench.planted"): "the measured code must never import the test hooks; "
                  "a process whose environment asks for one loads them by name"}


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


def _by_name_strings(path: Path) -> list[tuple[int, str]]:
    """(line, string) for every "rlbench.module:attribute" string in the file."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"rlbench(\.\w+)+:\w+", n.value)]


def test_imports_by_name_are_seen():
    """A "module:attribute" string is an import: the hook points name the test hooks that way; the registries
    list their entries by import, lazily inside a function where `rlbench --help` must not load them."""
    assert BY_NAME["rlbench.core.hooks"] == {"rlbench.planted"} and "rlbench.planted" in GRAPH["rlbench.core.hooks"]
    assert "rlbench.core.schedules.sync" in GRAPH["rlbench.core.schedules"]  # the schedule registry
    assert "rlbench.engines.schedules.sync.engine" in GRAPH["rlbench.engines.schedules"]  # their engines
    assert "rlbench.experiments.regime.analysis" in GRAPH["rlbench.experiments.regime"]  # a lazy import
    assert "rlbench.reports.build" in GRAPH["rlbench.reports"]  # the reports' lazy names


def test_few_names_by_string_each_with_its_reason():
    """At most MAX_BY_NAME "module:attribute" strings, each with a comment on its line saying why it is not an
    import."""
    found = [(p, line, text) for p in MODULES.values() for line, text in _by_name_strings(p)]
    assert len(found) <= MAX_BY_NAME, found
    bare = [f"{p.relative_to(ROOT)}:{line}" for p, line, _ in found if "#" not in p.read_text().splitlines()[line - 1]]
    assert not bare, f"a name by string without its reason: {bare}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    """Every import, a name by string included, stays in the module's layer or below it; the one exception is
    BY_NAME_UPWARD's, with its reason."""
    upward = {d for d in BY_NAME[module] if (module, d) in BY_NAME_UPWARD}
    bad = sorted(d for d in GRAPH[module] - upward if d in LAYER and LAYER[d] not in BELOW[LAYER[module]])
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
    """Each schedule's engine is its folder (engines/schedules/<name>/; its record is core/schedules/<name>.py);
    folders share only the protocols (common.py). A schedule that reuses another's engine is given it by the
    registry of engines (engines/schedules/__init__.py: one_step_off gets bounded_async's, k pinned to 1)."""
    folders = {p.name for p in (ROOT / "engines" / "schedules").iterdir() if (p / "__init__.py").is_file()}
    assert {"sync", "periodic_async", "bounded_async", "one_step_off"} <= folders
    shared = {"rlbench.engines.schedules.common"}
    for m in (m for m in GRAPH if m.startswith("rlbench.engines.schedules.")):
        own = "rlbench.engines.schedules." + m.split(".")[3]
        bad = sorted(d for d in GRAPH[m] if _under(d, ["rlbench.engines.schedules"]) and d not in shared
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


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of graph (imports and names by string alike), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if d not in graph or d == m:
                continue
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (cycle := visit(d, path + [d])):
                return cycle
        state[m] = 2
        return None

    return next((c for m in sorted(graph) if m not in state and (c := visit(m, [m]))), None)


def test_no_import_cycles():
    assert (cycle := _cycle(GRAPH)) is None, " -> ".join(cycle)


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
    """The rules above are not vacuous: a core module importing the runner breaks the first one, by statement
    or by name; a name by string is an edge of the cycle check, and one without its reason is caught."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from rlbench.run.cell import run_cell\n    from rlbench.engines.rollout import _x\n"
                    'WHERE = "rlbench.analysis.verdict:verdict_of"\n')
    found = {_target(mod, name) for mod, name in _imports(path)}
    assert {"rlbench.run.cell", "rlbench.analysis.verdict"} <= found and not found <= CORE_MODULES
    assert _by_name_strings(path) == [(4, "rlbench.analysis.verdict:verdict_of")]  # no comment on its line
    # the core's config naming the verdict by string closes a cycle (the verdict imports the core's config)
    graph = {**GRAPH, "rlbench.core.config": GRAPH["rlbench.core.config"] | found}
    assert _cycle(graph) is not None and _cycle(GRAPH) is None


WIDTH = 100  # characters a line of package code (docs/architecture/conventions.md)


def long_lines(root: Path) -> list[str]:
    """file:line of every line of package code longer than WIDTH characters."""
    out = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if len(line) > WIDTH:
                    out.append(f"{path.relative_to(root)}:{n} ({len(line)} characters)")
    return out


def test_package_lines_fit_100_characters():
    assert long_lines(ROOT) == []


def test_a_long_line_is_found(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "wide.py").write_text("x = 1\n" + "y = '" + "a" * 100 + "'\n")
    assert long_lines(tmp_path) == [f"core/wide.py:2 ({len('y = ' + repr('a' * 100))} characters)"]
