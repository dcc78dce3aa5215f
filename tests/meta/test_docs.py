"""The documentation holds: every relative link in README.md, docs/**/*.md and the schedules' pages
(engines/schedules/<name>/README.md) reaches a file of the tree (and a heading of it, where the link names
one), and every `rlbench ...` command line a code block shows parses against the command line interface
itself (its subcommand exists, every option is one of that subcommand's, the arguments fit), without running
anything. The code and the documents cite only documents that ship with the project.
What a user would notice: a link of the manual that leads nowhere, a command copied from it that
`rlbench` refuses, a citation of a page they cannot read.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from rlbench.cli import app

from conftest import ROOT
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "engines").rglob("README.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
PROGRAMS = ("rlbench", ".venv/bin/rlbench", ".venv-vllm/bin/rlbench")
SHELL = ("", "bash", "sh", "shell", "console")


def outside_code(text: str, spans: bool = True) -> str:
    """text without its fenced code blocks and, with spans, its inline code spans (links there are not links)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line) if spans else line)
    return "\n".join(out)


def code_lines(text: str) -> list[str]:
    """The lines of the fenced shell code blocks (no language, or bash, sh, shell, console; a `text` block
    is a diagram or output), a line continued by a trailing backslash joined to the next."""
    out, fenced, shell, pending = [], False, False, ""
    for line in text.splitlines():
        fence = FENCE.match(line)
        if fence:
            fenced, pending = not fenced, ""
            shell = line.strip()[3:].strip().lower() in SHELL
            continue
        if not (fenced and shell):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a markdown text's headings."""
    found = re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", outside_code(text, spans=False), re.M)
    return {slug(m.group(1)) for m in found}


def broken_links(text: str, base: Path) -> list[str]:
    """The relative links of a markdown text (read from the folder `base`) that reach no file, or no heading
    of the file they name (`#anchor` alone: of the text itself)."""
    bad = []
    for target in LINK.findall(outside_code(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...: not relative
            continue
        path, _, anchor = target.partition("#")
        file = (base / path).resolve() if path else None
        if file is not None and not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and (file is None or file.is_file()) and \
                anchor not in anchors(file.read_text() if file is not None else text):
            bad.append(f"{target}: no heading #{anchor}")
    return bad


CLI = typer.main.get_command(app)


def commands(line: str) -> list[list[str]]:
    """The rlbench invocations of a shell line: [arguments after the program] for each, the line split at
    &&, ||, ; and |, leading VAR=value assignments and redirections skipped, comments dropped."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return []
    out, segment, target_next = [], [], False
    for w in [*words, "&&"]:
        if target_next:  # the file of a redirection
            target_next = False
            continue
        redirect = re.fullmatch(r"\d?(>>?|<)(&\d+|\S+)?", w)  # `> file`, `>file`, `2>&1`: the shell's
        if redirect:
            target_next = redirect.group(2) is None
            continue
        if w in ("&&", "||", ";", "|"):
            while segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]):
                segment = segment[1:]
            if segment and segment[0] in PROGRAMS:
                out.append(segment[1:])
            segment = []
        else:
            segment.append(w)
    return out


def command_problems(args: list[str]) -> list[str]:
    """Why `rlbench ARGS` would not parse: an unknown subcommand, an option the subcommand does not have, or
    arguments that do not fit it; [] when it parses."""
    if not args:
        return []
    if args[0] in ("--help", "-h"):
        return []
    sub = CLI.commands.get(args[0])
    if sub is None:
        return [f"no subcommand {args[0]!r} (there are: {', '.join(CLI.commands)})"]
    known = {o for p in sub.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")} | {"--help"}
    unknown = [a.split("=", 1)[0] for a in args[1:] if a.startswith("-") and a != "-" and a.split("=", 1)[0] not in known]
    if unknown:
        return [f"rlbench {args[0]} has no option {u}" for u in unknown]
    if "--help" in args[1:]:
        return []
    try:
        with CLI.make_context("rlbench", [args[0]], resilient_parsing=True) as parent:
            sub.make_context(args[0], list(args[1:]), parent=parent)
    except Exception as e:  # click's usage errors (typer's vendored click or click's own)
        return [f"rlbench {' '.join(args)}: {e}"]
    return []


def shown_commands() -> list[tuple[str, str, list[str]]]:
    """(file, line, arguments) of every rlbench invocation a code block of the documentation shows."""
    return [(p.relative_to(ROOT).as_posix(), line, args) for p in DOCS for line in code_lines(p.read_text())
            for args in commands(line)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc):
    assert not broken_links(doc.read_text(), doc.parent)


def test_every_shown_command_parses():
    shown = shown_commands()
    assert len(shown) > 30  # the README's examples and the docs' commands are all read
    bad = [f"{f}: {line.strip()}: {p}" for f, line, args in shown for p in command_problems(args)]
    assert not bad, "\n".join(bad)


def test_a_broken_link_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("# Here\n\n## A section (with W&B)\n")
    (tmp_path / "docs" / "code.md").write_text("### `configs/cpu-accuracy.yaml`\n## Seeds: `--seeds`\n")
    text = ("# Top\n[ok](docs/here.md) [ok](docs/here.md#a-section-with-wb) [web](https://example.org/x.md) "
            "[gone](docs/missing.md) [anchor](docs/here.md#no-such-heading) `[in code](docs/nothing.md)` "
            "[self](#top) [self](#bottom) [code](docs/code.md#configscpu-accuracyyaml) "
            "[code](docs/code.md#seeds---seeds)\n```\n[in a block](docs/nothing.md)\n```\n")
    assert broken_links(text, tmp_path) == ["docs/missing.md: no such file",
                                            "docs/here.md#no-such-heading: no heading #no-such-heading",
                                            "#bottom: no heading #bottom"]


def test_a_bad_command_is_caught():
    assert command_problems(commands("rlbench run --ablation none --set run.iterations=2")[0]) == []
    assert command_problems(commands("rlbench report runs/x --markdown > docs/results/x.md")[0]) == []
    assert command_problems(commands("rlbench run --no-such-option 3")[0]) == ["rlbench run has no option --no-such-option"]
    assert command_problems(commands("rlbench report runs/x --add")[0])  # --add needs a value
    assert command_problems(commands("rlbench compare runs/a")[0])  # RUN_B missing
    assert command_problems(commands("rlbench frobnicate")[0])[0].startswith("no subcommand 'frobnicate'")
    assert commands("RLBENCH_SLOW=decode:0.10 rlbench check --against main~3  # comment") == \
        [["check", "--against", "main~3"]]
    assert commands("bash scripts/setup.sh && .venv/bin/rlbench run") == [["run"]]
    assert commands("rlbench report R --markdown > out.md 2>&1 | tee x") == [["report", "R", "--markdown"]]
    assert code_lines("```bash\nrlbench run --set a=1 \\\n  --set b=2\n```\nrlbench prose\n"
                      "```text\nrlbench report / compare ──► tables\n```\n") == ["rlbench run --set a=1    --set b=2"]


def project_files() -> list[Path]:
    """The project's source and text files (no test fixtures, no caches)."""
    folders = ["bench", "core", "engines", "analysis", "reports", "tests", "scripts", "configs", "docs", ".ci",
               ".github"]
    files = [ROOT / "README.md", ROOT / "pyproject.toml", *ROOT.glob("Dockerfile*")]
    return files + [p for f in folders for p in (ROOT / f).rglob("*") if p.is_file() and "fixtures" not in p.parts
                    and "__pycache__" not in p.parts
                    and p.suffix in (".py", ".md", ".yaml", ".yml", ".json", ".sh", ".toml", "")]


CITATION = re.compile(r"(docs/[\w./-]+\.md),\s*'([^']+)'((?:\s+and\s+'[^']+')*)")


def bad_citations(text: str) -> list[str]:
    """`docs/<page>.md, 'Section'` citations (and `... 'A' and 'B'`) that name no page or no heading of it."""
    bad = []
    for m in CITATION.finditer(text):
        page = ROOT / m.group(1)
        # a section's name may run over a line break of the prose (and a comment's `#`)
        sections = [re.sub(r"\s*\n\s*(#\s*)?", " ", s)
                    for s in (m.group(2), *re.findall(r"'([^']+)'", m.group(3)))]
        if not page.is_file():
            bad.append(f"{m.group(1)}: no such page")
            continue
        have = anchors(page.read_text())
        bad += [f"{m.group(1)}, '{s}': no such section" for s in sections if slug(s) not in have]
    return bad


def test_no_citation_of_notes_outside_the_project():
    """The code and the documents cite docs/ (architecture/, metrics.md), never design notes kept elsewhere."""
    names = ("DESIGN" + ".md", "STYLE" + ".md")
    cited = [f"{p.relative_to(ROOT)}:{i}" for p in project_files()
             for i, line in enumerate(p.read_text(errors="ignore").splitlines(), 1) if any(n in line for n in names)]
    assert not cited, cited


def test_citations_name_existing_sections():
    """Every `docs/<page>.md, 'Section'` the code cites is a heading of that page."""
    bad = [f"{p.relative_to(ROOT)}: {b}" for p in project_files() for b in bad_citations(p.read_text(errors="ignore"))
           if p.name != "test_docs.py"]
    assert not bad, bad
    assert not bad_citations("(docs/architecture/schedules.md, 'Tri-model' and 'Shared-prompt attention'), "
                             "docs/metrics.md, 'TPSPD'")
    assert bad_citations("docs/architecture/schedules.md,\n'No such section'") == \
        ["docs/architecture/schedules.md, 'No such section': no such section"]
    assert bad_citations("docs/nowhere.md, 'Placement'") == ["docs/nowhere.md: no such page"]
