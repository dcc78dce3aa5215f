"""The cells of `--ablation peers` (and of `--ablation trl_on_policy`, its sync, trl and trl_cb):
rlbench's own beside TRL's GRPOTrainer on the same devices and workload; and of `--ablation verl`:
rlbench's beside VERL's own GRPO trainer and its asynchronous recipes (VERL_CELLS).

    sync            rlbench's reference: colocated ranks, each generating then training its shard
    periodic_async  rlbench's periodic asynchrony on the same devices
    trl             TRL on-policy: one pinned rank per device (data parallel: gloo on CPU, NCCL on
                    CUDA), one optimizer step
                    per generation, the same loss (tests/unit/engines/test_trl_loss.py)
    trl_cb          TRL on-policy with transformers' continuous batching for its generation
                    (use_transformers_continuous_batching; engines/external/trl/settings.py
                    TrlOptions)
    trl_off_policy  TRL with OFF_POLICY_STEPS optimizer steps per generation (steps_per_generation
                    that
                    many times gradient_accumulation_steps: its off-policy setting;
                    train.ppo_mini_batches)
    sync+tri_model+shared_prompt
                    rlbench's sync with its two switches that keep the update: the old-policy pass
                    skipped on-policy (TRL skips it too) and a group's prompt computed once in
                    training

Every cell gets BASE under the user's --set: TRL's fixed advantage epsilon (so the losses are
equal), engine.compile=off (TRL runs eager: on CUDA, where rlbench would compile by default, no cell
gains from a compiler the others lack; --set engine.compile=all compiles rlbench's cells, and each
TRL cell's cost-settings table then shows the difference), and turns by iteration (run.interleave:
iteration k of every cell on nearly the same machine). A TRL cell is
run by the framework run.py names (engines/external/trl/adapter.py) in the cell's process.
Import-light: `rlbench --help` counts the cells.
"""
from __future__ import annotations

from rlbench.core.results.schema import split_seeded
from rlbench.core.schedules import by_role
from rlbench.core.schedules.spec import PERIODIC, REFERENCE

_REF, _ASYNC = by_role(REFERENCE).name, by_role(PERIODIC).name
OFF_POLICY_STEPS = 2  # TRL's off-policy cell: optimizer steps per generation
CELLS: list[tuple[str, dict]] = [
    (_REF, {"schedule": _REF}), (_ASYNC, {"schedule": _ASYNC}),
    ("trl", {"framework": "trl"}),
    ("trl_cb", {"framework": "trl", "framework_options": {"continuous_batching": True}}),
    ("trl_off_policy", {"framework": "trl", "ppo_mini_batches": OFF_POLICY_STEPS}),
    (f"{_REF}+tri_model+shared_prompt",
     {"schedule": _REF, "tri_model": True, "shared_prompt": True})]
# TRL's fixed advantage epsilon (equal losses); rlbench's engine eager, as TRL's GRPOTrainer runs
# (its torch_compile off: engines/external/trl/settings.py), so no cell gains from a compiler the
# others lack; turns by iteration
BASE = {"train": {"adv_eps": 1e-4}, "engine": {"compile": "off"}, "run": {"interleave": True}}
ABOUT = ("rlbench's sync and periodic-async beside TRL's GRPOTrainer on-policy (padded generate, "
         f"and continuous batching) and with {OFF_POLICY_STEPS} steps per generation, then sync "
         "with tri-model and shared-prompt, on the same devices; the stage breakdown side by side")


# `--ablation verl`: VERL's synchronous trainer and its asynchronous recipes beside rlbench's two
# schedules (engines/external/verl/recipes.py), each VERL cell in a pair with a sync run of its own
# (run.interleave_pairs: a VERL cell holds a dozen processes and several GiB; two cells' processes
# alive at a time)
VERL = "verl"
VERL_ABLATION = "verl"
VERL_CELLS: list[tuple[str, dict]] = [
    (_REF, {"schedule": _REF}), (_ASYNC, {"schedule": _ASYNC}),
    ("verl", {"framework": VERL}),
    ("verl_one_step_off", {"framework": VERL, "framework_options": {"recipe": "one_step_off"}}),
    ("verl_fully_async",
     {"framework": VERL, "framework_options": {"recipe": "fully_async", "staleness": 0.0}}),
    ("verl_fully_async_stale",
     {"framework": VERL, "framework_options": {"recipe": "fully_async", "staleness": 1.0}}),
    ("verl_fully_async_partial",
     {"framework": VERL,
      "framework_options": {"recipe": "fully_async", "staleness": 1.0, "partial_rollout": True}})]
VERL_BASE = {"engine": {"compile": "off"}, "run": {"interleave": True, "interleave_pairs": True}}
ABOUT_VERL = ("rlbench's sync and periodic-async beside VERL's own GRPO trainer and its "
              "one-step-off and fully-async recipes (staleness 0 and 1, with and without partial "
              "rollout) on the same cores, each VERL cell in turns with a sync run of its own "
              "(needs bash scripts/setup.sh --verl)")

TRL_CELLS = (_REF, "trl", "trl_cb")  # `--ablation trl_on_policy`: the on-policy comparison alone
ABOUT_TRL = ("rlbench's sync beside TRL's GRPOTrainer on-policy (padded generate, and continuous "
             "batching) on the same devices: peers' first three cells, the question of whether "
             "rlbench's baseline is as fast as TRL")


def ablations() -> dict[str, list[tuple[str, dict]]]:
    """`--ablation peers`: its cells, sync first (every ratio is over it); `--ablation
    trl_on_policy`: sync and TRL's two on-policy cells (half the cells, for a short window)."""
    return {"peers": list(CELLS), "trl_on_policy": [c for c in CELLS if c[0] in TRL_CELLS],
            VERL_ABLATION: list(VERL_CELLS)}


def framework_of(cell: str) -> str | None:
    """The framework that runs an ablation cell (by its name, a seed's suffix dropped); None:
    rlbench."""
    return _switches(cell).get("framework")


def framework_options(cell: str) -> dict:
    """The peer framework's own settings of an ablation cell (no rlbench config key), e.g. TRL's
    continuous batching; {} for the framework's defaults."""
    return dict(_switches(cell).get("framework_options") or {})


def _switches(cell: str) -> dict:
    name = split_seeded(cell)[0].split("@", 1)[0]  # a pair's sync run is named sync@<other>
    return {**dict(CELLS), **dict(VERL_CELLS)}.get(name, {})
