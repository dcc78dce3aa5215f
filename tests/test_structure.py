"""Dependency direction (DESIGN.md §3): CLI -> runner -> engines -> core; the core imports no engine, report
or CLI code; engines import no other engine's internals; no private names across modules; no cycles.

Read from the source (every `import`, lazy ones inside functions included, and imports by name: a
`module:attribute` string, as the registries name records and builders), so a violation fails here even
when no test happens to execute the import. Every module is classified as core or harness (or engine)."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"bench": "rlbench", "engines": "rlbench.engines", "reports": "rlbench.reports"}
# The shared core: config models, stage recorder, result schema and writer, metrics, device and placement.
CORE = {"rlbench." + m for m in ("config", "stages", "schema", "writer", "metrics", "device", "placement",
                                 "profiling", "provenance", "errors", "faults", "slowdown", "peak", "components",
                                 "progress", "procs", "limits",
                                 "utilisation", "predict", "metric_table", "hostcpu")}
HARNESS = ("rlbench.cli", "rlbench.runner", "rlbench.ablation", "rlbench.check", "rlbench.check_metrics",
           "rlbench.baseline", "rlbench.simulate", "rlbench.reports", "rlbench.check_stats", "rlbench.check_ab",
           "rlbench.check_ab_power", "rlbench.check_calibrate", "rlbench.against", "rlbench.interleave",
           "rlbench.seeds", "rlbench.resume", "rlbench.regime", "rlbench.seed_pool", "rlbench.families",
           "rlbench.ladder")
# The registries: core modules that name engine builders by string, imported only when a component is built.
REGISTRIES = ("rlbench.components", "rlbench.schedules")


def _modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


MODULES = _modules()
CORE |= {m for m in MODULES if m == "rlbench.schedules" or m.startswith("rlbench.schedules.")}  # the records
CORE.add("rlbench")  # the package's __init__


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


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_is_read():
    assert "rlbench.engines.factory" in GRAPH["rlbench.runner"]
    assert {"rlbench.config", "rlbench.engines.trainer.trainer"} <= MODULES.keys()


def test_every_module_is_classified():
    engines = {m for m in MODULES if _under(m, ["rlbench.engines"])}
    loose = sorted(m for m in MODULES if m not in CORE and m not in engines and not _under(m, HARNESS))
    assert not loose, f"classify these as core or harness: {loose}"


def test_imports_by_name_are_seen():
    """The schedule registry loads its records by name, and the records name their engines' builders."""
    assert "rlbench.schedules.sync" in GRAPH["rlbench.schedules"]
    assert "rlbench.engines.schedules.sync" in BY_NAME["rlbench.schedules.sync"]


@pytest.mark.parametrize("module", sorted(CORE))
def test_the_core_imports_only_the_core(module):
    """Only the registries name engine code, and only by string (built when a component is built)."""
    allowed = CORE | ({d for d in BY_NAME[module] if _under(d, ["rlbench.engines"])}
                      if _under(module, REGISTRIES) else set())
    assert GRAPH[module] <= allowed, sorted(GRAPH[module] - allowed)


def test_engines_import_no_harness_report_or_cli_code():
    bad = {m: sorted(d for d in deps if _under(d, HARNESS))
           for m, deps in GRAPH.items() if m.startswith("rlbench.engines")}
    assert not {m: d for m, d in bad.items() if d}


def test_the_trainer_uses_only_the_rollout_interface():
    allowed = {"rlbench.engines.rollout", "rlbench.engines.rollout.base"}
    bad = {m: sorted(d for d in deps if _under(d, ["rlbench.engines.rollout"]) and d not in allowed)
           for m, deps in GRAPH.items() if m.startswith("rlbench.engines.trainer")}
    assert not {m: d for m, d in bad.items() if d}


def test_rollout_knows_neither_schedules_nor_trainer():
    bad = {m: sorted(d for d in deps if _under(d, ["rlbench.engines.schedules", "rlbench.engines.trainer"]))
           for m, deps in GRAPH.items() if m.startswith("rlbench.engines.rollout")}
    assert not {m: d for m, d in bad.items() if d}


def test_schedules_share_only_common():
    schedules = {m for m in GRAPH if m.startswith("rlbench.engines.schedules.")}
    bad = {m: sorted(d for d in GRAPH[m] & schedules if not d.endswith(".common")) for m in schedules}
    assert not {m: d for m, d in bad.items() if d}


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


def test_a_planted_violation_is_caught(tmp_path):
    """The rules above are not vacuous: a core module importing the runner breaks the first one."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from rlbench.runner import run_cell\n    from rlbench.engines.rollout import _x\n")
    found = {_target(mod, name) for mod, name in _imports(path)}
    assert "rlbench.runner" in found and not found <= CORE
