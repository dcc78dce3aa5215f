"""`rlbench check --against REF`: benchmark the accepted commit and this tree on the same machine,
in the same job, interleaved, and judge new / old (asv's `continuous`, pytest-benchmark's
`compare`).

1. REF (a commit or ref; default `accepted`: the commit in bench/baselines/ACCEPTED, moved on
   purpose when a change is meant to move performance) is resolved in this tree's git repository. A
   clone without it (shallow, or a commit never fetched) is an error, never a pass.
2. The old tree is materialised once per commit (`git archive`, under the cache folder) and imported
   in place through a generated package shim on PYTHONPATH: the same layout as an editable install,
   with the installed dependencies of this environment (nothing re-downloaded).
3. Both trees run the same workload (this tree's config file) as the two sides of one turn ring
   (bench/run/interleave.py): iteration k of every cell runs old and new back to back, old first on
   even k, new first on odd k. RLBENCH_SLOW and RLBENCH_FAULT (planted changes) reach only the new
   tree.
4. bench/check/ab.py judges every metric new / old against this run's own iteration-to-iteration
   noise.
Folder: <out>/<stamp>-check-<sha>/ with ab.json, old/ and new/ (the two runs), old.log and new.log.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rlbench.check import ab as check_ab
from rlbench.check import envs
from rlbench.core.devices import procs
from rlbench.core.errors import UserError
from rlbench.core.results import provenance, schema
from rlbench.core.results.provenance import git_commit, source_root
from rlbench.run import interleave
from rlbench.run.around import new_run_dir

ACCEPTED = Path("bench") / "baselines" / "ACCEPTED"
PLANTED_ENV = ("RLBENCH_SLOW", "RLBENCH_SLOW_STAGES", "RLBENCH_FAULT")  # the new tree's alone
AB_FILE = "ab.json"


def _git(repo: Path, *args: str, check: bool = True) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise UserError(f"git {' '.join(args)} in {repo}: {e}") from None
    if check and out.returncode:
        raise UserError(f"git {' '.join(args)} in {repo}: "
                        f"{out.stderr.strip() or out.stdout.strip()}")
    return out.stdout.strip() if out.returncode == 0 else ""


def resolve(ref: str, repo: Path | None = None) -> tuple[str, str]:
    """-> (what REF named, full commit sha); `accepted` reads bench/baselines/ACCEPTED. Exit 2 when
    the clone does not have it, or when the accepted commit is not an ancestor of HEAD."""
    repo = repo or source_root()
    if not _git(repo, "rev-parse", "--is-inside-work-tree", check=False):
        raise UserError(f"--against {ref}: {repo} is not a git checkout (A/B needs the history)")
    named, accepted = ref, ref == "accepted"
    # the history's anchor commit (bench/check/record.py), named as such
    if ref.startswith("anchor:"):
        ref = ref.split(":", 1)[1]
        named = f"anchor ({ref[:12]})"
    if accepted:
        path = repo / ACCEPTED
        if not path.is_file():
            raise UserError(f"--against accepted: {path} not found (it holds the accepted commit's "
                            f"sha)")
        words = [w for line in path.read_text().splitlines() if not line.startswith("#") for w
                 in line.split()]
        if not words:
            raise UserError(f"{path}: no commit in it (one sha on a line; '#' lines are comments)")
        ref, named = words[0], f"accepted ({words[0][:12]})"
    sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if not sha:
        shallow = _git(repo, "rev-parse", "--is-shallow-repository", check=False) == "true"
        raise UserError(f"--against {named}: commit {ref!r} is not in this clone ({repo})"
                        + ("; it is a shallow clone: `git fetch --unshallow` first" if shallow else
                           "; fetch it (`git fetch origin`) or name a commit this clone has"))
    # what this tree's history accepted: an ancestor of it (another REF may be any commit)
    if accepted:
        _check_ancestor(repo, sha, named)
    return named, sha


def _check_ancestor(repo: Path, sha: str, named: str) -> None:
    """Exit 2 when the accepted commit is not an ancestor of HEAD (a sha from another branch, or one
    a rebase rewrote): judged against it, the check would compare with a history this tree does not
    have."""
    head = _git(repo, "rev-parse", "HEAD", check=False)
    if not head:
        return  # no commit yet: nothing to be an ancestor of
    if subprocess.run(["git", "merge-base", "--is-ancestor", sha, head], cwd=repo,
                      capture_output=True).returncode:
        base = _git(repo, "merge-base", sha, head, check=False)
        raise UserError(f"--against {named}: {ACCEPTED} names {sha[:12]}, which is not an ancestor "
                        f"of this tree's commit {head[:12]}; their merge base is "
                        f"{base[:12] if base else 'none (no common history)'}: "
                        "move ACCEPTED to a commit of this tree's history")


def materialise(sha: str, repo: Path | None = None) -> Path:
    """The tree of commit sha, importable as `rlbench`: -> the shim folder to put on PYTHONPATH."""
    # inside: it imports torch; judging a run folder needs none
    from rlbench.engines.model.tiny import cache_root

    repo = repo or source_root()
    home = cache_root() / "trees" / sha
    shim = home / "shim"
    if (shim / "rlbench" / "__init__.py").is_file():
        return shim
    tmp = Path(tempfile.mkdtemp(prefix=f"{sha[:12]}-", dir=_mkdir(home.parent)))
    try:
        archive = subprocess.run(["git", "archive", "--format=tar", sha], cwd=repo,
                                 capture_output=True, timeout=300)
        if archive.returncode:
            raise UserError(f"git archive {sha}: {archive.stderr.decode(errors='replace').strip()}")
        (tmp / "tree").mkdir()
        subprocess.run(["tar", "-x", "-C", str(tmp / "tree")], input=archive.stdout, check=True,
                       timeout=300)
        _check_protocol(tmp / "tree", sha)
        # paths of where the tree will be, after the rename
        _write_shim(home / "tree", tmp / "shim")
        if (shim / "rlbench" / "__init__.py").is_file():
            return shim  # another check materialised it meanwhile: keep theirs (it may be running)
        shutil.rmtree(home, ignore_errors=True)  # a half-made one from an interrupted check
        os.replace(tmp, home)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return shim


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def _check_protocol(tree: Path, sha: str) -> None:
    """The old tree must take turns through the same ring protocol as this one."""
    # bench/run/interleave.py; at bench/'s top level in a tree from before bench/ had subpackages
    src = next((p for p in (tree / "bench" / "run" / "interleave.py",
                            tree / "bench" / "interleave.py") if p.is_file()),
               tree / "bench" / "run" / "interleave.py")
    found = re.search(r"^PROTOCOL = (\d+)", src.read_text(), re.M) if src.is_file() else None
    if not found or int(found[1]) != interleave.PROTOCOL:
        have = (f"protocol {found[1]}" if found
                else "no turn ring (it predates `rlbench check --against`)")
        raise UserError(f"--against {sha[:12]}: that tree has {have}; this tree speaks protocol "
                        f"{interleave.PROTOCOL}: name a commit at or after the one that introduced "
                        f"it")


# Put first on sys.meta_path by the shim: a module of the package is looked for in the old tree's
# folders only. The editable install's finder (setuptools) knows every module of the new tree by
# name and comes after the path on the import path, so without this a module the old tree lacks
# would come from the new one.
_GUARD = """
import importlib.machinery as _machinery
import sys as _sys


class _OldTreeOnly:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if not name.startswith("rlbench."):
            return None
        spec = _machinery.PathFinder.find_spec(name, path)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} in the tree under test "
                                      f"({__path__[0]})", name=name)
        return spec


_sys.meta_path.insert(0, _OldTreeOnly)
"""


def _write_shim(tree: Path, shim: Path) -> None:
    """shim/rlbench/__init__.py makes `rlbench` the tree's bench/ (and rlbench.engines its engines/,
    ...: rlbench.X is the tree's top-level X/ where it has one, else bench/X, as its setup.py maps
    them; a tree from before core/ and analysis/ left bench/ holds them under bench/, found first),
    imported in place, so paths relative to the source (configs/) resolve as in a checkout; nothing
    of the package is imported from anywhere else (_GUARD)."""
    (shim / "rlbench").mkdir(parents=True)
    init = tree / "bench" / "__init__.py"
    (shim / "rlbench" / "__init__.py").write_text(
        "# Generated by `rlbench check --against`: the package rlbench of the tree next to this "
        f"folder.\n__path__ = [{str(tree / 'bench')!r}, {str(tree)!r}]\n"
        + _GUARD +
        f"__file__ = {str(init)!r}\n"
        "exec(compile(open(__file__).read(), __file__, 'exec'))\n")


def _run_cmd(config: Path, ablation: str, sets: list[str], out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "rlbench.cli", "run", "--config", str(config), "--ablation",
           ablation,
           "--out", str(out), "--no-progress", "--no-report", "--set", "run.interleave=true"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _env(shim: Path | None, ring: Path, side: int) -> dict:
    env = dict(os.environ)
    env[interleave.ENV] = f"{ring}:{side}"
    if shim is not None:  # the old tree: its package first, nothing planted
        env["PYTHONPATH"] = os.pathsep.join([str(shim), *filter(None, [env.get("PYTHONPATH")])])
        for key in PLANTED_ENV:
            env.pop(key, None)
    return env


def run_ab(ref: str, config: Path | None, ablation: str = "ci", sets: list[str] | None = None,
           out: Path = Path("runs"), echo=print) -> Path:
    """Run REF's tree and this one interleaved; -> the A/B folder (ab.json, old/, new/)."""
    named, sha = resolve(ref)
    config = Path(config or source_root() / "configs" / "ci-ab.yaml").resolve()
    if not config.is_file():
        raise UserError(f"--config {config}: file not found")
    shim = materialise(sha)
    ab = new_run_dir(out, f"check-{sha[:10]}")
    ring = interleave.Ring.create(ab / "ring", sides=2)
    record = {"schema_version": schema.SCHEMA_VERSION, "kind": "ab", "against": named,
              "old_commit": sha,
              "new_commit": _new_commit(), "config": str(config), "ablation": ablation,
              "sets": sets or [],
              "planted": {k: os.environ[k] for k in PLANTED_ENV if os.environ.get(k)},
              "date": provenance.now()}
    schema.atomic_write_json(ab / AB_FILE, record)
    echo(f"rlbench check: {ablation} on {config.name}, {named} (old) and this tree (new) "
         f"interleaved -> {ab}")
    t0 = time.monotonic()
    sides = [Side(name, _run_cmd(config, ablation, sets or [], ab / name),
                  _env(tree, ring.folder, i))
             for i, (name, tree) in enumerate((("old", shim), ("new", None)))]
    codes = run_sides(ring, sides, ab)
    shutil.rmtree(ab / "ring", ignore_errors=True)
    record.update(exit_codes={"old": codes[0], "new": codes[1]},
                  wall_s=round(time.monotonic() - t0, 1),
                  # the machine's load as the run ended
                  load=[round(x, 2) for x in os.getloadavg()])
    schema.atomic_write_json(ab / AB_FILE, record)
    if codes[0] != 0:
        raise UserError(f"--against {named}: the old tree could not run the workload (exit "
                        f"{codes[0]}):\n"
                        + tail(ab / "old.log"))
    if codes[1] == 2:
        raise UserError(f"this tree rejected the workload (exit 2):\n" + tail(ab / "new.log"))
    return ab


@dataclass
class Side:
    """One side of an A/B as it runs: its folder's name under the A/B folder ("old", "new"; its log
    beside it), its `rlbench run` command and that command's environment (its seat in the ring
    included)."""
    name: str
    cmd: list[str]
    env: dict


def run_sides(ring, sides: list[Side], ab: Path) -> list[int]:
    """Start both `rlbench run`s; a side that ends is abandoned in the ring (the other never waits
    for it). Ctrl-C reaches both (same process group); their measured iterations are kept. -> their
    exit codes."""
    procs = []
    for side in sides:
        log = open(ab / f"{side.name}.log", "w")
        procs.append((subprocess.Popen(side.cmd, stdout=log, stderr=subprocess.STDOUT, env=side.env,
                                       preexec_fn=_die_with_check), log))
    codes: list[int | None] = [None] * len(procs)
    try:
        while None in codes:
            for i, (proc, log) in enumerate(procs):
                if codes[i] is None and proc.poll() is not None:
                    codes[i] = proc.returncode
                    log.close()
                    ring.abandon(i)
            time.sleep(0.2)
    except KeyboardInterrupt:
        for proc, _ in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise
    return codes


def _die_with_check() -> None:
    """In each side's `rlbench run` (before exec): SIGTERM when this check dies, however it dies;
    the run then ends its cells and workers as on any SIGTERM (core/devices/procs.py)."""
    procs.die_with_parent(signal.SIGTERM)


def tail(path: Path, n: int = 3000) -> str:
    text = path.read_text(errors="replace") if path.is_file() else ""
    return text[-n:]


def _new_commit() -> str | None:
    return git_commit()


def run_dirs(ab: Path) -> tuple[Path, Path]:
    """(old run folder, new run folder) of an A/B folder; a clear error when it is not one."""
    ab = Path(ab)
    found = []
    for side in ("old", "new"):
        runs = sorted(p for p in (ab / side).glob("*")
                      if p.is_dir()) if (ab / side).is_dir() else []
        if not runs:
            raise UserError(f"{ab}: no {side}/ run in this A/B folder (was it interrupted before "
                            f"any cell ran?)")
        found.append(runs[0])
    return found[0], found[1]


def is_ab(path: Path) -> bool:
    return (Path(path) / AB_FILE).is_file()


def judge(ab: Path, confirming: bool = False):
    """CheckResult of an A/B folder (bench/check/ab.py); the verdict is also saved in its ab.json.
    confirming: the second run of bench/check/confirm.py (its flag line: CONFIRM_STATS)."""
    record = json.loads((Path(ab) / AB_FILE).read_text())
    old, new = run_dirs(ab)
    label = record.get("label") or f"{record['against']} = {record['old_commit'][:12]}"
    stats = check_ab.CONFIRM_STATS if confirming else check_ab.AB_STATS
    res = check_ab.compare(old, new, label, stats)
    annotate(record, res)
    record["verdict"] = {"exit_code": res.exit_code, "line": res.verdict.splitlines()[0],
                         "worse": [r.metric for r in res.rows if r.mark == "worse"]}
    schema.atomic_write_json(Path(ab) / AB_FILE, record)
    return res


def annotate(record: dict, result) -> None:
    """An A/B of two environments or configs: the lines that open its report (what differs between
    A and B, beside the stages that moved: bench/check/envs.py head_lines), kept with the result."""
    if record.get("mode"):
        result.baseline_info["head"] = envs.head_lines(record, result.rows)


def record_confirmation(first: Path, second: Path, final) -> None:
    """Both A/B folders name each other and carry the combined verdict (bench/check/confirm.py)."""
    verdict = {"exit_code": final.exit_code, "line": final.verdict.splitlines()[0],
               "worse": [r.metric for r in final.rows if r.mark == "worse"]}
    for path, key, other in ((first, "confirmed_by", second), (second, "confirms", first)):
        record = json.loads((Path(path) / AB_FILE).read_text())
        record.update({key: str(Path(other).resolve()), "combined_verdict": verdict})
        schema.atomic_write_json(Path(path) / AB_FILE, record)
