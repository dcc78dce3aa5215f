"""The CI gate's tiers (scripts/ci_bench.sh): which A/B workloads `rlbench check --against accepted`
runs.

- main: configs/ci-ab.yaml, the `ci` ablation (sync, +periodic_async, +tri_model, +shared_prompt),
  on every run.
- schedules: configs/ci-schedules.yaml, the `families` ablation (sync, barrier, periodic_async,
  one_step_off, bounded_async k=2, and k=2 with partial rollout): every registered schedule and
  partial rollout. It runs only when a file that only those cells exercise differs between the
  accepted commit and this tree (committed or not, untracked files included; a Python file whose
  code is the same but for comments, docstrings and layout is left out): SCHEDULE_PATHS. The
  families ablation is one the accepted commit knows, so the old tree can run the workload (an
  ablation added since could not be run by it). `python -m rlbench.check.tiers [REF]` prints the
  tiers to run, one a line (name, ablation, config), and why, on stderr.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rlbench.check.against import resolve
from rlbench.core.errors import UserError
from rlbench.core.results.provenance import source_root


@dataclass(frozen=True)
class Tier:
    name: str
    ablation: str
    config: str  # relative to the source tree
    # runs when one of these changed since the accepted commit; () = always
    paths: tuple[str, ...] = ()


# Code that only the schedules tier's cells run: the schedules' own folders and records, partial
# rollout's mailbox, the decoupled loss (grpo.py: bounded staleness trains with it), the ladder's
# cells (not the config: both trees run the same one).
SCHEDULE_PATHS = ("engines/schedules/", "core/schedules/", "engines/rollout/mailbox.py",
                  "engines/trainer/grpo.py", "bench/experiments/families/cells.py")
DOCS = (".md",)  # a schedule's page (engines/schedules/<name>/README.md) changes no cell's cost
TIERS = (Tier("main", "ci", "configs/ci-ab.yaml"),
         Tier("schedules", "families", "configs/ci-schedules.yaml", SCHEDULE_PATHS))


def git(root: Path, *args: str) -> str | None:
    """git's output in the checkout at root; None where git fails."""
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    return out.stdout if out.returncode == 0 else None


def changed(sha: str, paths: tuple[str, ...]) -> list[str]:
    """Files under `paths` that differ between commit sha and the working tree, untracked ones
    included; documentation (DOCS) left out."""
    root = source_root()
    files = {f for args in (("diff", "--name-only", sha),
                            ("ls-files", "--others", "--exclude-standard"))
             for f in (git(root, *args, "--", *paths) or "").split()}
    return sorted(f for f in files if not f.endswith(DOCS) and not comments_only(root, sha, f))


def comments_only(root: Path, sha: str, path: str) -> bool:
    """Whether Python file `path` differs from its version at commit sha only in comments,
    docstrings and layout: such a change moves no cell's cost."""
    if not path.endswith(".py") or not (root / path).is_file():
        return False
    old = git(root, "show", f"{sha}:{path}")
    if old is None:  # not in that commit
        return False
    try:
        return code_of(old) == code_of((root / path).read_text())
    except SyntaxError:
        return False


def code_of(source: str) -> str:
    """The syntax tree of `source` without its docstrings (comments and layout are not in it), as
    text."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node,
                       (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:]
    return ast.dump(tree)


def to_run(ref: str = "accepted") -> list[tuple[Tier, str]]:
    """[(tier, why)] of the tiers the gate runs against REF."""
    _, sha = resolve(ref)
    out = []
    for tier in TIERS:
        if not tier.paths:
            out.append((tier, "every run"))
            continue
        files = changed(sha, tier.paths)
        if files:
            out.append((tier,
                        f"{len(files)} file(s) changed since {sha[:10]}: {', '.join(files[:5])}"
                              + (" ..." if len(files) > 5 else "")))
    return out


def main(argv: list[str]) -> int:
    try:
        tiers = to_run(argv[0] if argv else "accepted")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    for tier, why in tiers:
        print(tier.name, tier.ablation, tier.config)
        print(f"tier {tier.name} ({tier.config}, --ablation {tier.ablation}): {why}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
