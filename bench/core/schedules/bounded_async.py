"""bounded_async: rollout up to k weight versions ahead, decoupled PPO loss (engines/schedules/bounded_async.py)."""
from pydantic import Field
from rlbench.core.components import Options, RolloutBackendName
from rlbench.core.schedules.spec import BOUNDED, DECOUPLED, MODEL_BOUNDED, POOLS, ScheduleSpec, one_step_per_iteration


class BoundedAsyncOptions(Options):
    max_staleness: int = Field(json_schema_extra={"key": "engine.max_staleness"})
    prox_logp: str = Field(json_schema_extra={"key": "train.prox_logp"})
    consume_order: str = Field(json_schema_extra={"key": "engine.consume_order"})
    partial_rollout: bool = Field(json_schema_extra={"key": "engine.partial_rollout"})
    resume_kv: str = Field(json_schema_extra={"key": "engine.resume_kv"})


def _partial_rollout_where_supported(cfg) -> str | None:
    """Partial rollout polls shared memory between decode steps: the built-in sampler in local workers."""
    if cfg.engine.partial_rollout and (cfg.rollout.backend != RolloutBackendName.BUILTIN
                                       or cfg.engine.launcher != "local"):
        return ("engine.partial_rollout needs rollout.backend=builtin and engine.launcher=local (got "
                f"rollout.backend={cfg.rollout.backend}, engine.launcher={cfg.engine.launcher}): the built-in "
                "sampler takes new weights between decode steps from shared memory; the vLLM backend drives "
                "vLLM's synchronous engine, which cannot pause a request mid-generation")
    return None


SCHEDULE = ScheduleSpec(
    name="bounded_async",
    summary="rollout runs up to engine.max_staleness weight versions ahead of training (AReaL-style), trained "
            "with the decoupled PPO loss",
    options=BoundedAsyncOptions, builder="rlbench.engines.schedules.bounded_async:build",
    absent={"max_staleness": 0, "prox_logp": None, "partial_rollout": False},
    owns=("partial_rollout", "resume_kv"),
    checks=(one_step_per_iteration("bounded_async", "it consumes groups as they arrive and takes one optimizer "
                                   "step per iteration, like periodic_async"), _partial_rollout_where_supported),
    layout=POOLS, model=MODEL_BOUNDED, loss=DECOUPLED, runs_ahead=True, role=BOUNDED)
