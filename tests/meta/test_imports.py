"""Imports sit at the top of a module, so a reader sees what it depends on. An import inside a function is
there for a reason its line gives (`# inside: <reason>`, on the import or on the comment line right above a
block of them): an optional dependency (vllm, ray, trl, torch_npu, ...), a module that must stay light
because `rlbench --help` and `rlbench config` import it, or a cycle. And those instant paths stay instant:
they import neither torch nor transformers.
What a user would notice: `rlbench --help`, `config`, `report` and `check` taking seconds instead of being
instant (test_instant_commands_import_no_torch, test_help_loads_only_what_its_texts_need); the `# inside:`
rule is for a reader of the code, who finds what a module depends on at its top.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
CLEANED = ["engines", "core", "bench/check", "bench/cli.py", "bench/run", "analysis",
           "bench/experiments", "bench/simulate", "bench/planted", "reports"]  # the folders held to the rule
REASON = "# inside:"


def inner_imports(tree: ast.AST) -> list[ast.stmt]:
    """The import statements that sit inside a function (at any depth)."""
    out = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(tree, False)
    return out


def unexplained(source: str) -> list[int]:
    """Line numbers of the function-level imports of `source` that give no reason: none on their own lines,
    none on the comment lines right above, and not right below another import that gives one."""
    lines = source.splitlines()
    block: set[int] = set()  # lines (1-based) of imports under a reason given on a comment line above them
    bad = []
    for node in sorted(inner_imports(ast.parse(source)), key=lambda n: n.lineno):
        own = lines[node.lineno - 1:node.end_lineno]
        above, i = [], node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.append(lines[i])
            i -= 1
        if any(REASON in ln for ln in above) or node.lineno - 1 in block:
            block.update(range(node.lineno, node.end_lineno + 1))
        elif not any(REASON in ln for ln in own):
            bad.append(node.lineno)
    return bad


def files(folder: str) -> list[Path]:
    path = ROOT / folder
    return [path] if path.is_file() else sorted(path.rglob("*.py"))


@pytest.mark.parametrize("folder", CLEANED)
def test_imports_inside_functions_say_why(folder):
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in files(folder) for n in unexplained(p.read_text())]
    assert not bad, f"imports inside functions without a `{REASON} <reason>` comment (move them to the top): {bad}"


def test_an_unexplained_import_is_caught():
    source = ("import os\n\n"
              "def f():\n    import json  # inside: a made-up reason\n    import csv\n    return json, csv\n\n"
              "def g():\n    # inside: optional dependency (vllm)\n    import vllm\n    from vllm import x\n\n"
              "    import sys\n    return sys\n")
    assert unexplained(source) == [5, 13]


INSTANT = [["--help"], ["config"], ["config", "--list"], ["config", "--docs"], ["run", "--help"]]


@pytest.mark.parametrize("args", INSTANT, ids=" ".join)
def test_instant_commands_import_no_torch(args):
    """`rlbench --help` and `rlbench config` answer at once: none of torch, transformers, scipy, pandas and
    matplotlib is imported."""
    code = ("import sys\nfrom rlbench.cli import main\nsys.argv = ['rlbench', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch', 'transformers', 'scipy', 'pandas', 'matplotlib') if m in sys.modules], "
            "file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


HELP = {"--help": ("pydantic", "rlbench.run.ablation_table"),  # the commands' summaries only
        "run --help": (),  # --ablation's list: the ablation table and its registries (pydantic models)
        "simulate --help": ()}


@pytest.mark.parametrize("args", list(HELP))
def test_help_loads_only_what_its_texts_need(args):
    """`rlbench --help` loads the glossary and not what the commands run: no rich (click's plain help), no
    config models, no run machinery, no simulator, and not the ablation table, which only `run --help`
    shows (docs/results/startup.md has the times)."""
    heavy = ("rich", "rlbench.core.config", "rlbench.core.config_files", "rlbench.run.ablation",
             "rlbench.run.around", "rlbench.simulate", "yaml", *HELP[args])
    code = ("import sys\nfrom rlbench.cli import main\nsys.argv = ['rlbench', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print([m for m in {heavy!r} if m in sys.modules], file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, *args.split()], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "Usage: rlbench" in proc.stdout, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr
    if args == "run --help":  # the list is made when shown: every ablation with what it compares
        assert "async (the default" in proc.stdout and "regime-quick (" in " ".join(proc.stdout.split())
