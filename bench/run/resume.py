"""`rlbench run --resume RUN_DIR`: finish an ablation that was interrupted or failed part-way.

The run's own ablation.json holds what is needed to run its cells again: the ablation name, the base
config, the seeds and the code version (provenance.code_digest). Completed cells are kept after a
check that they were measured with the configuration this run would give them now and by the same
code; anything else (a cell that failed, was interrupted, or never started) is run again from its
start in an emptied folder, since an iteration in the middle of a cell cannot be resumed on the same
footing (optimizer state, sampler state, warm caches). A mismatch is a UserError (exit 2): mixing
cells of two code versions or configs in one table would be comparing different things.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import typer
from rlbench.core.config_files import build_config
from rlbench.core.errors import UserError
from rlbench.core.results import provenance, schema
from rlbench.run.ablation import cell_context, cells_for, run_cells
from rlbench.run.around import finish, preflight, raise_failed
from rlbench.run.seeds import expand


def load(run_dir: Path) -> tuple[dict, object, list]:
    """-> (the ablation record, its base RunConfig, its cells as (name, config, seed)); UserError
    when RUN_DIR is not a run this rlbench can resume."""
    path = Path(run_dir) / schema.ABLATION
    if not path.is_file():
        raise UserError(f"--resume {run_dir}: no {schema.ABLATION} there (not a run folder of "
                        f"`rlbench run`)")
    record = schema.read_ablation(run_dir)
    if record.get("kind") != "ablation" or "config" not in record or "code_digest" not in record:
        raise UserError(f"--resume {run_dir}: {path} lacks the config and code version a resume "
                        "needs (written by an older rlbench); start a new run")
    base = build_config(record["config"], source=str(path))
    cells = expand(cells_for(record["name"], base, record.get("overrides")), record.get("seeds"))
    if [c for c, _, _ in cells] != [e["name"] for e in record["cells"]]:
        raise UserError(f"--resume {run_dir}: the cells of ablation {record['name']!r} are now "
                        f"{[c for c, _, _ in cells]}, the run has "
                        f"{[e['name'] for e in record['cells']]}")
    return record, base, cells


def check_code(record: dict, run_dir: Path, digest: str) -> None:
    if record["code_digest"] != digest:
        raise UserError(f"--resume {run_dir}: the run was made by rlbench code "
                        f"{record['code_digest']}, this is {digest} (the source changed); cells of "
                        "two code versions are not comparable, start a new run")


def plan(run_dir: Path, record: dict, cells: list, digest: str) -> list[str]:
    """Keep the verified complete cells, empty the folders of the rest and clear their exit codes;
    -> the names of the cells kept. Every kept cell is verified before anything is changed."""
    keep = [entry["exit_code"] == 0 and _complete(Path(run_dir) / entry["dir"]) for entry
            in record["cells"]]
    for entry, (name, cfg, _), kept in zip(record["cells"], cells, keep):
        if kept:
            _verify(Path(run_dir) / entry["dir"], name, cfg.model_dump(mode="json"), digest)
    for entry, kept in zip(record["cells"], keep):
        if not kept:
            entry["exit_code"] = None
            # from the start: nothing old stays
            shutil.rmtree(Path(run_dir) / entry["dir"], ignore_errors=True)
    schema.atomic_write_json(Path(run_dir) / schema.ABLATION, record)
    return [name for (name, _, _), kept in zip(cells, keep) if kept]


def _complete(folder: Path) -> bool:
    try:
        return schema.load_cell(folder).get("status") == "complete"
    except UserError:  # missing, unreadable or of another schema: run it again
        return False


def _verify(folder: Path, name: str, config: dict, digest: str) -> None:
    """A kept cell must have been measured with the config the run gives it and by this code."""
    res = schema.load_cell(folder)
    if res.get("config") != config:  # raw: an exact match, and the keys that differ by name
        keys = sorted(_diff(res.get("config") or {}, config))
        raise UserError(f"--resume: completed cell {name} ({folder / schema.RESULTS}) was run with "
                        f"a different config than the run's ablation.json gives it: "
                        f"{', '.join(keys[:8])}; start a new run")
    got = (res.get("provenance") or {}).get("code_digest")
    if got != digest:
        raise UserError(f"--resume: completed cell {name} was measured by rlbench code {got}, this "
                        f"is {digest}; "
                        "start a new run")


def _diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
    return out


def resume_run(run_dir: Path, progress: bool, end, refused: dict) -> None:
    """`--resume RUN_DIR`: the run's own config, ablation and seeds; completed cells kept. refused:
    the `rlbench run` options given with it ({option: value}): any set one is refused (exit 2); end:
    what to print and write at the end (around.Ending)."""
    given = [opt for opt, value in refused.items() if value]
    if given:
        raise UserError(f"--resume {run_dir} runs that run's own configuration (its "
                        f"ablation.json); leave out {', '.join(given)}")
    record, base, cells = load(run_dir)
    digest = provenance.code_digest()
    check_code(record, run_dir, digest)
    preflight(base, [], cell_context([cfg for _, cfg, _ in cells]))
    kept = plan(run_dir, record, cells, digest)
    typer.echo(f"rlbench: resuming {run_dir}: kept {len(kept)} completed cell(s) "
               f"({', '.join(kept) or 'none'}), running {len(cells) - len(kept)}", err=True)
    try:
        record = run_cells(cells, record, run_dir, progress)
    finally:
        finish(run_dir, end)
    raise_failed(record)
