"""Dependency direction (DESIGN.md §3): CLI -> runner -> engines -> core; the core imports no engine, report
or CLI code; engines import no other engine's internals; no private names across modules; no cycles.

Read from the source (every `import`, lazy ones inside functions included), so a violation fails here
even when no test happens to execute the import."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"bench": "rlbench", "engines": "rlbench.engines", "reports": "rlbench.reports"}
# The shared core: config models, stage recorder, result schema and writer, metrics, device and placement.
CORE = {"rlbench." + m for m in ("config", "stages", "schema", "writer", "metrics", "device", "placement",
                                 "profiling", "provenance", "errors", "faults", "slowdown", "peak", "components",
                                 "progress", "procs", "limits",
                                 "utilisation")}
HARNESS = ("rlbench.cli", "rlbench.runner", "rlbench.ablation", "rlbench.check", "rlbench.check_metrics",
           "rlbench.baseline", "rlbench.simulate", "rlbench.reports")


def _modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, imported name or None) for every rlbench import in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlbench"):
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.startswith("rlbench")]
    return out


def _target(module: str, name: str | None) -> str:
    """`from rlbench.x import y` names module rlbench.x.y when that is a module, else rlbench.x."""
    return f"{module}.{name}" if name and f"{module}.{name}" in MODULES else module


GRAPH = {m: {_target(mod, name) for mod, name in _imports(p)} for m, p in MODULES.items()}


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_is_read():
    assert "rlbench.engines.factory" in GRAPH["rlbench.runner"]
    assert {"rlbench.config", "rlbench.engines.trainer.trainer"} <= MODULES.keys()


@pytest.mark.parametrize("module", sorted(CORE))
def test_the_core_imports_only_the_core(module):
    assert GRAPH[module] <= CORE, sorted(GRAPH[module] - CORE)


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
        for d in sorted(GRAPH.get(m, ())):
            if d not in GRAPH or d == m:
                continue
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (cycle := visit(d, path + [d])):
                return cycle
        state[m] = 2
        return None

    for m in sorted(GRAPH):
        if m not in state:
            assert (cycle := visit(m, [m])) is None, " -> ".join(cycle)


def test_a_planted_violation_is_caught(tmp_path):
    """The rules above are not vacuous: a core module importing the runner breaks the first one."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from rlbench.runner import run_cell\n    from rlbench.engines.rollout import _x\n")
    found = {_target(mod, name) for mod, name in _imports(path)}
    assert "rlbench.runner" in found and not found <= CORE
