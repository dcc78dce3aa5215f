"""`rlbench check --env-a PYTHON --env-b PYTHON` and `--set-b key=value`: the same workload under
two environments (a dependency upgrade: torch, transformers, vLLM, TRL, VERL) or two configs,
measured as a commit A/B is (bench/check/against.py) and judged by the same code
(bench/check/ab.py).

1. Each side is a Python interpreter where rlbench is installed (B: this one unless --env-b names
   another), asked what it holds before anything runs (bench/check/envs.py): its packages and
   versions, its rlbench's result schema and ring protocol; bad input exits 2 naming the side and
   what.
2. Both run `rlbench run` on the same config file (this rlbench's copy, by path) as the two sides of
   one turn ring, A in the A/B folder's old/ and B in new/: iteration k of every cell runs under A
   and under B back to back, A first on even k, B first on odd k. --set-b changes B's config only.
   RLBENCH_SLOW and RLBENCH_FAULT (planted changes) reach B only, as they reach the new tree of a
   commit A/B.
3. `--engine trl|verl`: each side runs the peer framework's cell (`rlbench run --engine NAME`, which
   takes its turns in the shared ring), with the peer's own stage times. VERL runs in a venv of its
   own (engine.verl_python): two VERL venvs are compared with `--set engine.verl_python=A --set-b
   engine.verl_python=B`, and their packages are recorded and compared too.
4. ab.json records both sides (interpreter, Python, packages) and the packages that differ; in the
   history (--record) each environment is named by a digest of its packages where a commit A/B names
   a commit, so an upgrade's A/B chains on from the last one's B (bench/check/envs.py fingerprint).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlbench.check import against, envs
from rlbench.core.config_files import config_path
from rlbench.core.errors import UserError
from rlbench.core.results import provenance, schema
from rlbench.run import interleave
from rlbench.run.around import new_run_dir

# whose cells take their turns in a shared ring (MindSpeed-RL's do not)
ENGINES = ("rlbench", "trl", "verl")
VERL_KEY = "engine.verl_python"
DEFAULT_CONFIG = "ci-ab"  # the gate's workload (configs/ci-ab.yaml), shipped with the package


@dataclass
class Sides:
    """What differs between A and B: their interpreters (None: this one) and B's own config
    overrides; and the engine both run (rlbench's cells of --ablation, or a peer framework's
    cell)."""
    env_a: str | None = None
    env_b: str | None = None
    sets_b: list[str] = field(default_factory=list)
    engine: str = "rlbench"

    @property
    def mode(self) -> str | None:
        """"env" (two interpreters), "config" (one interpreter, --set-b), None (neither: a commit
        A/B)."""
        return "env" if self.env_a or self.env_b else "config" if self.sets_b else None


def run_env_ab(sides: Sides, config: Path | str | None, ablation: str, sets: list[str], out: Path,
               echo=print) -> Path:
    """Run the workload under A and B interleaved; -> the A/B folder (ab.json, old/ = A, new/ =
    B)."""
    config = _config(config)
    sets_a, sets_b = list(sets), [*sets, *sides.sets_b]
    a, b = _probe(sides)
    _check_engine(sides.engine, (a, b))
    record = _record(sides, config, ablation, (a, b), (sets_a, sets_b))
    ab = new_run_dir(out, f"check-{sides.mode}")
    ring = interleave.Ring.create(ab / "ring", sides=2)
    schema.atomic_write_json(ab / against.AB_FILE, record)
    side_b = f"environment B ({b.python})" if sides.mode == "env" else "config B"
    echo(f"rlbench check: {record['workload_text']} under {record['label']} (A, old/) and {side_b} "
         f"(B, new/) interleaved -> {ab}")
    if record["differ"]:
        differ = envs.format_diff([tuple(d) for d in record["differ"]])
        echo(f"rlbench check: packages that differ (A -> B): {differ}")
    t0 = time.monotonic()
    runs = [against.Side(name, _cmd(env, config, ablation, sides.engine, s, ab / name),
                         _environ(env, ring, i))
            for i, (name, env, s) in enumerate((("old", a, sets_a), ("new", b, sets_b)))]
    codes = against.run_sides(ring, runs, ab)
    shutil.rmtree(ab / "ring", ignore_errors=True)
    # the machine's load as the run ended
    record.update(exit_codes={"old": codes[0], "new": codes[1]},
                  wall_s=round(time.monotonic() - t0, 1),
                  load=[round(x, 2) for x in os.getloadavg()])
    schema.atomic_write_json(ab / against.AB_FILE, record)
    kind = "environment" if sides.mode == "env" else "config"
    for i, side in enumerate("AB"):  # A must run it; B's failure to run (exit 3) is a regression
        if codes[i] == 2 or (i == 0 and codes[i] != 0):
            raise UserError(f"{kind} {side} could not run the workload (exit {codes[i]}):\n"
                            + against.tail(ab / f"{runs[i].name}.log"))
    return ab


def _config(config: Path | str | None) -> Path:
    """The workload's config file, resolved here (a path, or a shipped config's name) and given to
    both sides by path, so both run the same file whatever their rlbench ships."""
    return config_path(config or DEFAULT_CONFIG).resolve()


def _probe(sides: Sides) -> tuple[envs.Env, envs.Env]:
    """Both sides' interpreters, asked once each (once in all where they are the same)."""
    py_a, py_b = sides.env_a or sys.executable, sides.env_b or sys.executable
    if envs.resolve_python("A", py_a) == envs.resolve_python("B", py_b):
        a = envs.probe("A", py_a)
        return a, envs.Env(**{**a.record(), "side": "B", "python": py_b})
    return envs.probe_both(py_a, py_b)


def _check_engine(engine: str, sides: tuple[envs.Env, envs.Env]) -> None:
    """An engine whose cell can take turns in a shared ring, with an rlbench on both sides that
    does."""
    if engine not in ENGINES:
        raise UserError(f"--engine {engine!r} with an A/B of environments or configs: allowed: "
                        f"{', '.join(ENGINES)} (MindSpeed-RL's cells do not take turns with "
                        "another side)")
    if engine != "rlbench":
        for env in sides:
            envs.require(env, "engine_turns",
                         f"taking turns as a side of `rlbench check --engine {engine}`")


def _record(sides: Sides, config: Path, ablation: str, found: tuple[envs.Env, envs.Env],
            sets: tuple[list[str], list[str]]) -> dict:
    """ab.json before the run: what each side is, what differs, and the workload."""
    a, b = found
    differ = envs.package_diff(a.packages, b.packages)
    verl = _verl_envs(sides.engine, found, sets) if sides.engine == "verl" else {}
    if verl:
        differ += [(f"[{VERL_KEY}] {n}", va, vb) for n, va, vb in envs.package_diff(*(
            verl.get(s, {}).get("packages", {}) for s in "AB"))]
    label = f"environment A ({a.python})" if sides.mode == "env" else "config A"
    workload = f"--engine {sides.engine}" if sides.engine != "rlbench" else f"--ablation {ablation}"
    return {"schema_version": schema.SCHEMA_VERSION, "kind": "ab", "mode": sides.mode,
            "against": label, "label": label,
            "old_commit": envs.fingerprint(a.packages, sets[0], a.version),
            "new_commit": envs.fingerprint(b.packages, sets[1], b.version),
            "tree_commit": provenance.git_commit(), "config": str(config),
            "ablation": ablation if sides.engine == "rlbench" else None,
            "engine": sides.engine, "sets": sets[0], "sets_b": list(sides.sets_b),
            "workload_text": f"{workload} on {config.name}",
            "envs": {"A": a.record(), "B": b.record()}, "differ": differ, "verl": verl,
            "planted": {k: os.environ[k] for k in against.PLANTED_ENV if os.environ.get(k)},
            "date": provenance.now()}


def _verl_envs(engine: str, found: tuple[envs.Env, envs.Env],
               sets: tuple[list[str], list[str]]) -> dict:
    """{side: VERL's venv as that side's cell will run it (its interpreter and packages)}:
    engine.verl_python where the side's --set names it, else the .venv-verl of the checkout that
    side's rlbench is installed from. A side with neither is left out: its `rlbench run --engine
    verl` refuses it (exit 2, with the install line)."""
    out = {}
    for env, side_sets in zip(found, sets):
        named = [s.split("=", 1)[1] for s in side_sets if s.split("=", 1)[0].strip() == VERL_KEY]
        checkout = Path(env.rlbench_path).parent
        python = named[-1] if named else str(checkout / ".venv-verl" / "bin" / "python")
        if named or Path(python).is_file():
            asked = envs.ask(env.side, python, flag=f"{VERL_KEY} of side {env.side}")
            out[env.side] = {"python": python, "version": asked.version, "packages": asked.packages}
    return out


def _cmd(env: envs.Env, config: Path, ablation: str, engine: str, sets: list[str],
         out: Path) -> list[str]:
    """One side's `rlbench run`, started by its own interpreter."""
    python = envs.resolve_python(env.side, env.python)
    cmd = [python, "-m", "rlbench.cli", "run", "--config", str(config)]
    cmd += ["--engine", engine] if engine != "rlbench" else ["--ablation", ablation]
    cmd += ["--out", str(out), "--no-progress", "--no-report", "--set", "run.interleave=true"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _environ(env: envs.Env, ring: interleave.Ring, side: int) -> dict:
    """Side's environment: its venv first on PATH, its seat in the ring; the planted changes reach B
    only."""
    out = envs.side_environ(env, dict(os.environ))
    out[interleave.ENV] = f"{ring.folder}:{side}"
    if side == 0:
        for key in against.PLANTED_ENV:
            out.pop(key, None)
    return out
