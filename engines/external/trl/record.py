"""A TRL run as an rlbench cell folder: results.json (rlbench's keys, metrics.cell_result) beside
events.jsonl, iterations.jsonl and samples.jsonl, so `report`, `compare` and the HTML report read it
as any cell. Its placement is checked as rlbench's sync ranks' is: a rank given other than its
device (its core, or its one visible GPU) and one thread fails the run (launch.check, exit 3)."""
from __future__ import annotations

import importlib.metadata as md
import os

from rlbench.core.devices.placement import Placement, Slot
from rlbench.core.errors import WorkerError
from rlbench.core.record.stages import Role
from rlbench.core.results import provenance as prov
from rlbench.core.results import metrics, schema
from rlbench.engines import launch
from rlbench.engines.external.trl import cost_settings, results, settings


def placement(world: int, kind: str = "cpu"):
    """The TRL ranks' plan: rlbench's colocated layout, one rank per device (a core or a GPU), one
    thread each."""
    slots = [Slot(f"{Role.COLOCATED.value}{i}", Role.COLOCATED.value, i, kind,
                  1) for i in range(world)]
    return Placement(slots, world, kind)


def switches(cfg, options) -> dict:
    """What results.json records the cell as: TRL's engine, on-policy or with several steps per
    generation, and TRL's own settings the cell varies (settings.TrlOptions)."""
    return {"engine": "trl", "schedule": "trl", "tri_model": False, "shared_prompt": False,
            "steps_per_generation": cfg.train.ppo_mini_batches, **options.as_dict()}


def provenance(obs0: dict | None) -> dict:
    info = {**prov.collect(), "framework": "trl", "version": _version("trl"),
            "accelerate": _version("accelerate"), "datasets": _version("datasets")}
    if obs0:
        info["device"], info["peak"] = obs0.get("device"), obs0.get("peak")
        info["cpu_threads"] = obs0.get("threads")
    return info


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def cell_results(run) -> tuple[dict, dict]:
    """results.json's dict for a TrlRun (adapter.py), at whatever point it stopped, and the JSONL
    streams beside it (events, samples: every rank's)."""
    raw = results.read(run.folder, run.world)
    iters = results.iterations(run.cfg, raw, run.world)
    plan = placement(run.world, run.kind)
    plan.observed = {s.worker: o for s, o in zip(plan.slots, raw["observed"]) if o is not None}
    status, error = _status(run, plan, len(iters))
    obs0 = raw["observed"][0] or {}
    differences = settings.differences(run.cfg, run.options, run.kind)
    costs = cost_settings.compare(obs0["trl_args"], obs0.get("model_facts") or {}, run.cfg,
                                  [d["setting"] for d in differences], obs0.get("rlbench_args")) \
        if obs0.get("trl_args") else []
    warnings = results.token_warnings(iters) + [f"a cost setting differs from rlbench's and is not "
                                                f"among the listed differences: {u}" for u
                                                in cost_settings.unlisted(costs)]
    res = metrics.cell_result(
        cell=run.name, switches=switches(run.cfg, run.options),
        config=run.cfg.model_dump(mode="json"),
        provenance=provenance(obs0), status=status, error=error,
        model={"kind": run.cfg.model.kind, "path": run.cfg.model.path,
               "exported": str(run.model_dir),
               "parameters": obs0.get("parameters"), "shape": obs0.get("shape")},
        iterations=iters, evals=raw["evals"], placement=plan.records(), devices=run.world,
        wall_s_total=sum(it["wall_s"] for it in iters), clock_t0=run.t0, warnings=warnings,
        external={"framework": "trl", "options": run.options.as_dict(), "differences": differences,
                  "cost_settings": costs, "trl_args": obs0.get("trl_args"),
                  "model_facts": obs0.get("model_facts"),
                  "rlbench_args": obs0.get("rlbench_args"),
                  "ranks_folder": str(run.folder), "session": os.getsid(0)})
    samples = [row for it in iters for row in results.numbered([s for s in raw["samples"]
                                                                if s["iteration"]
                                                                == it["iteration"]])]
    return res, {schema.EVENTS: raw["events"], schema.SAMPLES: samples,
                 schema.ITERATIONS: [{k: v for k, v in it.items() if k != "external"}
                                     for it in iters]}


def _status(run, plan, finished: int) -> tuple[str, str | None]:
    """The run's status, with the placement checked (a rank not given its core and one thread fails
    it)."""
    if run.status != "complete":
        return run.status, run.error
    try:
        launch.check(plan, plan.observed)
    except WorkerError as e:
        run.status, run.error = "failed", str(e)
        return run.status, run.error
    return ("complete", None) if finished >= run.cfg.run.iterations else ("incomplete", None)


def write_cell(out, res: dict, streams: dict) -> None:
    """The cell's files: the JSONL streams, then results.json (atomically) that summarises them."""
    for name, rows in streams.items():
        _write_jsonl(out / name, rows)
    schema.atomic_write_json(out / schema.RESULTS, res)


def _write_jsonl(path, rows: list[dict]) -> None:
    path.unlink(missing_ok=True)
    out = schema.JsonlAppender(path)
    for row in rows:
        out.write(row)
    out.close()
