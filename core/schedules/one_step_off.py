"""one_step_off: VERL's one-step-off-policy schedule (recipe/one_step_off_policy): the rollout of
iteration k+1 runs while iteration k trains, on weights one version old. That is bounded staleness
with k = 1, so its cost model is bounded_async's (MODEL_BOUNDED) and its engine bounded_async's
(engines/schedules/__init__.py), with k pinned to 1; it is registered under the name VERL users look
for."""
from rlbench.core.components import Options
from rlbench.core.schedules.spec import (DECOUPLED, MODEL_BOUNDED, ONE_STEP, POOLS, ScheduleSpec,
                                         one_step_per_iteration)
from rlbench.core.schedules.options import (CONSUME_ORDER, MAX_STALENESS, PROX_LOGP, ConsumeOrder,
                                            ProxLogp)

NAME = "one_step_off"


class OneStepOffOptions(Options):
    max_staleness: int = MAX_STALENESS
    prox_logp: ProxLogp = PROX_LOGP
    consume_order: ConsumeOrder = CONSUME_ORDER


def _k_is_one(cfg) -> str | None:
    if cfg.engine.max_staleness != 1:
        return (f"engine.max_staleness={cfg.engine.max_staleness} with engine.schedule={NAME}: "
                "one-step-off is k=1 by definition; use the bounded-staleness schedule for a "
                "larger k")
    return None


SCHEDULE = ScheduleSpec(
    name=NAME,
    summary="VERL's one-step-off policy: the next iteration's rollout runs while this one trains, "
            "on weights one version old (bounded staleness, k=1, decoupled PPO loss)",
    options=OneStepOffOptions, pinned={"max_staleness": 1},
    checks=(_k_is_one, one_step_per_iteration(NAME,
                                              "it consumes groups as they arrive and takes one "
                                              "optimizer "
                                                    "step per iteration")),
    layout=POOLS, model=MODEL_BOUNDED, loss=DECOUPLED, runs_ahead=True, role=ONE_STEP)
