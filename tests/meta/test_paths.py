"""Every path-like reference in the project's comments, docstrings, scripts and documents resolves: a
comment that sends a reader to `reports/predict.py` after that file has moved is a wrong map. A
reference is a path under one of the tree's top-level folders (bench/, engines/, reports/, configs/,
scripts/, tests/, docs/, .ci/, .github/); `folder/module.name` resolves when `folder/module.py` exists
(a module's attribute). In Python files only comments and docstrings are read (code builds paths of its
own, a test's made-up ones among them); a segment in capitals is a placeholder (configs/NAME). Another
project's path is written as theirs ("MindSpeed-RL's configs/model/") and not checked; files that
commands write are listed below with the command.
What a user would notice: a page of docs/, a script's usage line or an error message's pointer that sends
them to a file that is not there."""
from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

from conftest import ROOT

REF = re.compile(r"(?<![\w./-])((?:bench|engines|reports|configs|scripts|tests|docs|\.ci|\.github)/"
                 r"[\w./-]*[\w-])")
# Files that a command writes, not files of the tree.
WRITTEN = {"bench/baselines/gpu.json": "rlbench check --update on a GPU runner",
           "bench/baselines/npu.json": "rlbench check --update on an NPU runner"}
SKIPPED_FILES = {"tests/meta/test_docs.py", "tests/meta/test_paths.py"}  # their docstrings and comments show broken paths
SUFFIXES = (".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt")


def _resolves(ref: str) -> bool:
    ref = ref.rstrip(".")
    if (ROOT / ref).exists() or ref in WRITTEN or any(re.fullmatch(r"[A-Z_]+", p) for p in ref.split("/")):
        return True
    head, _, _attr = ref.rpartition(".")  # folder/module.attribute
    return bool(head) and (ROOT / f"{head}.py").is_file()


def prose(name: str) -> list[tuple[int, str]]:
    """(line number, text) of what a reader reads as prose: a Python file's comments and docstrings, every
    line of any other file."""
    text = (ROOT / name).read_text()
    if not name.endswith(".py"):
        return list(enumerate(text.splitlines(), 1))
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            first = body[0].lineno
            out += [(first + i, line) for i, line in enumerate(body[0].value.value.splitlines())]
    return out


def broken_references(files: list[str]) -> list[str]:
    """'file:line: reference' for every reference in `files` (relative to the root) that resolves nowhere."""
    out = []
    for name in files:
        previous = ""
        for i, line in prose(name):
            for m in REF.finditer(line):
                ref = m.group(1)
                # "MindSpeed-RL's configs/...", the owner possibly at the end of the line before
                before = line[:m.start()] if line[:m.start()].strip() else previous.rstrip() + " "
                theirs = re.search(r"'s `?$", before)
                if theirs or any(c in line[m.end():m.end() + 1] for c in "{*<") or _resolves(ref):
                    continue
                out.append(f"{name}:{i}: {ref}")
            previous = line
    return out


def test_every_path_reference_resolves():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [f for f in tracked.split() if f.endswith(SUFFIXES) and f not in SKIPPED_FILES
             and not f.startswith("published/") and (ROOT / f).is_file()]  # published/: runs' files as they wrote them
    assert not broken_references(files)


def test_a_stale_reference_is_caught(tmp_path, monkeypatch):
    import test_paths

    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "here.py").write_text(
        "# see bench/here.py, bench/here.helper and MindSpeed-RL's configs/model/\n"
        "# and reports/predict.py (moved)\n"
        "def f():\n"
        '    """As bench/gone.py did; configs/NAME."""\n'
        '    return "bench/made_up.py"  # code, not prose\n')
    monkeypatch.setattr(test_paths, "ROOT", tmp_path)
    assert broken_references(["bench/here.py"]) == ["bench/here.py:2: reports/predict.py",
                                                    "bench/here.py:4: bench/gone.py"]
