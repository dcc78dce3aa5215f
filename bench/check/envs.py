"""The two sides of `rlbench check --env-a PYTHON --env-b PYTHON`: each a Python interpreter (a
venv's, or a wrapper script that starts one) where rlbench is installed, asked what it holds before
anything runs.

Each interpreter is run once with a short probe (a subprocess: its own sys.path, its own packages,
whatever a wrapper sets): its packages and their versions as its own importlib.metadata sees them
(the first of a name on its path, the one an import gets), the sitecustomize or usercustomize module
it ran at its start (code in no package, named by its file and a digest of it), its rlbench, that
rlbench's result schema and turn-ring protocol. Bad input is refused before anything runs (exit 2),
naming the side and what: an interpreter that does not exist or does not run, no rlbench there, an
rlbench whose result schema differs from this one's (this rlbench judges both sides' result files)
or that takes turns by other rules (both sides share one turn ring).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.run import interleave

# What this rlbench does as a side of an environment A/B beyond the ring's protocol, read by the
# other rlbench from here: "engine_turns": `rlbench run --engine NAME` takes its turns in a shared
# ring (bench/run/around.py).
FEATURES = ("engine_turns",)
# a cold interpreter on a busy machine reads its packages' metadata in seconds
PROBE_TIMEOUT_S = 120
_MARK = "RLBENCH-PROBE "
_PROBE = r"""
import json, os, re, sys
import importlib.metadata as md
out = {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
       "version": sys.version.split()[0], "packages": {}}
for d in md.distributions():  # in sys.path order: the first of a name is the one an import gets
    name = d.metadata["Name"]
    if name:
        out["packages"].setdefault(re.sub(r"[-_.]+", "-", name).lower(), d.version)
# code every start of that Python runs, in no package
for hook in ("sitecustomize", "usercustomize"):
    path = getattr(sys.modules.get(hook), "__file__", None)
    if path:
        import hashlib
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:12]
            out["packages"][hook + ".py"] = digest + " at " + path
try:
    import rlbench
    out["rlbench_path"] = list(rlbench.__path__)[0]
    from rlbench.core.results import schema
    out["schema_version"] = schema.SCHEMA_VERSION
    from rlbench.run import interleave
    out["protocol"] = interleave.PROTOCOL
    try:
        from rlbench.check import envs
        out["features"] = list(envs.FEATURES)
    except ImportError:
        out["features"] = []
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print("RLBENCH-PROBE " + json.dumps(out))
"""


@dataclass
class Env:
    """What one side's interpreter holds (the probe's answer)."""
    side: str  # "A" or "B"
    python: str  # as given (a path, or a command on PATH)
    executable: str = ""  # sys.executable there
    prefix: str = ""
    base_prefix: str = ""
    version: str = ""  # Python's
    packages: dict = field(default_factory=dict)  # {normalised name: version}
    rlbench_path: str = ""
    schema_version: int | None = None
    protocol: int | None = None
    features: list = field(default_factory=list)
    error: str = ""  # rlbench could not be imported there: why

    @property
    def is_venv(self) -> bool:
        return bool(self.prefix) and self.prefix != self.base_prefix

    def record(self) -> dict:
        return asdict(self)


def resolve_python(side: str, python: str, flag: str | None = None) -> str:
    """The interpreter's path: a path as given, or a command found on PATH. Exit 2 naming the side
    (and the option, `flag`) when there is none."""
    flag = flag or f"--env-{side.lower()}"
    found = python if os.sep in python else shutil.which(python)
    if not found or not Path(found).is_file():
        raise UserError(f"{flag} {python}: environment {side}'s interpreter does not exist "
                        "(give the Python of a venv where rlbench is installed, "
                        "e.g. .venv-old/bin/python)")
    if not os.access(found, os.X_OK):
        raise UserError(f"{flag} {python}: environment {side}'s interpreter is not executable")
    return str(Path(found).absolute())


def probe(side: str, python: str, environ: dict | None = None) -> Env:
    """Ask side's interpreter what it holds; UserError (exit 2, naming the side) where it does not
    run, or holds no rlbench this one can take turns with and judge."""
    env = ask(side, python, environ)
    compatible(env)
    return env


def ask(side: str, python: str, environ: dict | None = None, flag: str | None = None) -> Env:
    """What an interpreter holds, rlbench or not (a peer framework's venv too); UserError (exit 2,
    naming the side, or `flag`) where it does not exist or does not run as Python."""
    flag, path = flag or f"--env-{side.lower()}", resolve_python(side, python, flag)
    try:
        out = subprocess.run([path, "-c", _PROBE], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S, env=environ, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        raise UserError(f"{flag} {python}: environment {side}'s interpreter could not be run: "
                        f"{e}") from None
    answer = next((line[len(_MARK):] for line in out.stdout.splitlines()
                   if line.startswith(_MARK)), None)
    if out.returncode or answer is None:
        said = (out.stderr.strip() or out.stdout.strip())[-400:]
        raise UserError(f"{flag} {python}: environment {side}'s interpreter did not run as Python "
                        f"(exit {out.returncode}): {said or 'no output'}")
    return Env(side, python, **json.loads(answer))


def compatible(env: Env) -> None:
    """Exit 2 naming the side where its rlbench is missing, or writes results of another schema, or
    takes turns by another protocol than this rlbench's."""
    where = f"--env-{env.side.lower()} {env.python}: environment {env.side}"
    if env.schema_version is None or env.protocol is None:
        missing = "No module named 'rlbench'" in env.error
        raise UserError(f"{where} has no rlbench" + (f" ({env.error})" if not missing else "")
                        + ": install rlbench there (the same version as this one: pip install -c "
                          "constraints.txt RLBENCH_WHEEL, or pip install -e CHECKOUT)")
    if env.schema_version != schema.SCHEMA_VERSION:
        raise UserError(f"{where}: its rlbench ({env.rlbench_path}) writes result schema "
                        f"{env.schema_version}, this rlbench reads schema {schema.SCHEMA_VERSION}: "
                        "install the same rlbench on both sides")
    if env.protocol != interleave.PROTOCOL:
        raise UserError(f"{where}: its rlbench ({env.rlbench_path}) takes turns by ring protocol "
                        f"{env.protocol}, this rlbench by {interleave.PROTOCOL}: "
                        "install the same rlbench on both sides")


def probe_both(python_a: str, python_b: str,
               environs: tuple[dict | None, dict | None] = (None, None)) -> tuple[Env, Env]:
    """Both sides' probes at once (each is seconds of a cold interpreter); A's error first where
    both fail."""
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(probe, side, py, env)
                for side, py, env in zip("AB", (python_a, python_b), environs)]
        return jobs[0].result(), jobs[1].result()


def require(env: Env, feature: str, what: str) -> None:
    """Exit 2 naming the side where its rlbench predates `feature` (FEATURES), which `what`
    needs."""
    if feature not in env.features:
        raise UserError(f"--env-{env.side.lower()} {env.python}: environment {env.side}'s rlbench "
                        f"({env.rlbench_path}) predates {what}: install this rlbench there")


def package_diff(a: dict, b: dict) -> list[tuple[str, str | None, str | None]]:
    """[(name, version in A or None, version in B or None)] of every package whose version differs,
    by name."""
    return [(n, a.get(n), b.get(n)) for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]


def format_diff(diff: list[tuple[str, str | None, str | None]], limit: int = 8) -> str:
    """'transformers 5.19.0 -> 5.25.0; ray absent -> 2.60.0' (A -> B), the first `limit` and a
    count."""
    words = [f"{n} {va or 'absent'} -> {vb or 'absent'}" for n, va, vb in diff]
    more = f"; and {len(words) - limit} more" if len(words) > limit else ""
    return "; ".join(words[:limit]) + more


def fingerprint(packages: dict, sets: list[str], python: str = "") -> str:
    """An environment's name in the history, where a commit's sha would be: `env:` and a digest of
    its packages and versions, its Python's version and its config overrides, so that the next A/B
    whose A is this B chains on (bench/check/history.py chain_of). A start-up module counts by its
    content, not by the folder it lies in (the next job builds the same environment elsewhere)."""
    content = {name: str(v).split(" at ")[0] for name, v in packages.items()}
    text = json.dumps({"packages": content, "sets": list(sets), "python": python}, sort_keys=True)
    return "env:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def side_environ(env: Env, base: dict) -> dict:
    """The environment a side's `rlbench run` starts with: base, and for a venv its bin folder first
    on PATH and VIRTUAL_ENV set, so that a program the run starts by name (a launcher, a compiler)
    is the venv's."""
    out = dict(base)
    if env.is_venv:
        out["VIRTUAL_ENV"] = env.prefix
        path = [str(Path(env.prefix) / "bin"), *filter(None, [base.get("PATH")])]
        out["PATH"] = os.pathsep.join(path)
    return out


# ----------------------------------------------------------------- the report's first lines

# cost:<stage>: a stage's CPU seconds per unit of its work (bench/check/ab.py UNITS)
STAGE_FAMILY = "cost"
MOVED = ("worse", "better")


def head_lines(record: dict, rows: list) -> list[str]:
    """The first lines of an environment or config A/B's report: each side's interpreter, the
    packages that differ (A -> B), B's own config overrides, then the stages that moved (judged
    worse or better) and any other metric that did: what changed beside where it shows."""
    sides = record.get("envs") or {}
    kind = "environments" if record.get("mode") == "env" else "configs"
    named = [f"{s} = {e.get('python')} (Python {e.get('version')})" for s, e in sides.items()]
    lines = [f"A/B of two {kind}: " + "; ".join(named)]
    diff = [tuple(d) for d in record.get("differ") or []]
    lines.append(f"packages that differ (A -> B): {format_diff(diff)}" if diff else
                 "packages that differ: none (the same versions on both sides)")
    if record.get("sets_b"):
        lines.append("config of B only: " + " ".join(f"--set-b {s}" for s in record["sets_b"]))
    moved = [r for r in rows if r.mark in MOVED]
    stages = [r for r in moved if r.metric.split(":")[0] == STAGE_FAMILY]
    others = [r for r in moved if r not in stages]
    named = "; ".join(_moved(r, r.metric.split(":", 1)[1]) for r in stages)
    lines.append("stages that moved (B / A): " + (named or "none beyond their floors"))
    if others:
        more = f"; and {len(others) - 6} more" if len(others) > 6 else ""
        lines.append("other metrics that moved: "
                     + "; ".join(_moved(r, r.metric) for r in others[:6]) + more)
    return lines


def _moved(row, name: str) -> str:
    ci = f" [{row.ci[0]:+.1%}, {row.ci[1]:+.1%}]" if row.ci else ""
    change = f" {row.change:+.1%}{ci}" if row.change is not None else ""
    return f"{name}{change} {row.mark}"
