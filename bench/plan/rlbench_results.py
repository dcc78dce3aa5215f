"""rlbench's own results: a sync cell's results.json (or its cell folder, or a run folder holding a
sync cell). With the cell's samples.jsonl and events.jsonl beside it, the plan uses the cost model's
full measurements (costmodel.predict.measurements: decode-step seconds by batch bucket and cache
window, each sample's length), exactly as the report's in-run prediction does; with results.json
alone, the iterations' stage seconds as a log (the colocated ranks' stage_s, summed over ranks,
divided by them)."""
from __future__ import annotations

from pathlib import Path

from rlbench.core import schedules
from rlbench.core.config_files import recorded_config
from rlbench.core.costmodel.fromlog import LoggedStep
from rlbench.core.errors import UserError
from rlbench.core.record.stages import PER_SAMPLE_TRAIN_STAGES, Role, Stage, role_of
from rlbench.core.results import schema
from rlbench.core.schedules.spec import MODEL_COLOCATED
from rlbench.plan.logs import NON_NEGATIVE, StepLog, checked, missing

FORMAT = "rlbench"
REQUIRED = ("wall_s", "tokens", "stage_s", "response_len_mean")


def looks_like(doc) -> bool:
    return isinstance(doc, dict) and "schema_version" in doc and "iterations" in doc


def sync_cell(path: Path) -> dict:
    """The sync cell a path names: a results.json, a cell folder or a run folder."""
    path = Path(path)
    folder = path.parent if path.is_file() else path
    cells = schema.load_run(folder)
    for c in cells:
        name = (c.get("switches") or {}).get("schedule") or recorded_config(c).engine.schedule
        spec = schedules.get(name)
        if spec is not None and spec.model == MODEL_COLOCATED and c.get("iterations"):
            return c
    found = ", ".join(str(c.get("cell")) for c in cells) or "none"
    raise UserError(f"{path}: no synchronous cell with measured iterations (cells: {found}); "
                    "plan reads a sync run")


def _ranks(cell: dict, events: list[dict]) -> int:
    """The sync cell's colocated ranks: its placement's, else the workers its events name."""
    placed = sum(1 for p in cell.get("placement") or [] if p.get("role") == Role.COLOCATED.value)
    return placed or len({e["worker"] for e in events if role_of(e["worker"])
                          == Role.COLOCATED.value}) or 1


def _step(it: dict, ranks: int, path: Path) -> LoggedStep:
    """One iteration -> LoggedStep; a value that is not finite and in its range names the iteration
    and key."""
    for key in REQUIRED:
        if key not in it:
            raise missing(path, None, key, f"iteration {it.get('iteration')}")
    k = it.get("iteration")
    v = {key: checked(it[key], path, None, f"iterations[{k}].{key}", step=k)
         for key in ("wall_s", "tokens", "response_len_mean", "num_samples",
                     "response_len_max") if it.get(key) is not None}
    st = {name: checked(x, path, None, f"iterations[{k}].stage_s.{name}", NON_NEGATIVE, k)
          for name, x in (it["stage_s"] or {}).items()}
    prompt = checked(it["prompt_tokens"], path, None, f"iterations[{k}].prompt_tokens",
                     NON_NEGATIVE, k) \
        if v.get("num_samples") and it.get("prompt_tokens") is not None else None
    return LoggedStep(step=k, wall_s=v["wall_s"], tokens=v["tokens"],
                      response_mean=v["response_len_mean"],
                      gen_s=st.get(Stage.ROLLOUT.value, 0.0) / ranks,
                      train_s=sum(st.get(s, 0.0) for s in PER_SAMPLE_TRAIN_STAGES) / ranks,
                      weight_sync_s=st.get(Stage.WEIGHT_SYNC.value, 0.0) / ranks,
                      samples=it.get("num_samples"),
                      prompt_mean=prompt / v["num_samples"] if prompt is not None else None,
                      response_max=v.get("response_len_max"),
                      old_logprob_s=st.get(Stage.OLD_LOGPROB.value, 0.0) / ranks)


def _known(cell: dict) -> dict:
    cfg = recorded_config(cell)
    return {"group_size": cfg.rollout.group_size, "max_num_seqs": cfg.rollout.max_num_seqs}


def read(path: Path) -> StepLog:
    cell = sync_cell(path)
    folder = Path(cell["_dir"])
    its = cell["iterations"]
    warm = sum(1 for it in its if it.get("warmup"))
    samples, events = schema.load_samples(folder), schema.load_events(folder)
    ranks = _ranks(cell, events)
    log = StepLog(FORMAT, folder / schema.RESULTS, [_step(it, ranks, folder) for it in its],
                  ["iterations[].wall_s", "tokens", "stage_s", "response_len_mean",
                   "response_len_max",
                   "num_samples", "prompt_tokens"], devices=int(cell.get("devices") or ranks),
                  warmup=warm,
                  extra={"cell": cell, "known": _known(cell)})
    if samples and events:
        log.extra.update(samples=samples, events=events)
        log.keys = ["iterations", "rollout_stats (decode-step seconds by bucket and window)",
                    "samples.jsonl (every response length)", "events.jsonl (stage events per rank)"]
    else:
        log.notes.append(f"{folder}: no samples.jsonl/events.jsonl beside results.json: planned "
                         "from the iterations' stage seconds, as from a framework's log")
    return log


