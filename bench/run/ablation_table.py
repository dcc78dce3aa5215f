"""The ablations by name: each one's cells (name, engine switches) and what it compares.
`--ablation` and `rlbench run --help` read this table; bench/run/ablation.py runs it. It loads the
schedule and experiment registries and nothing of the run machinery, so that `rlbench --help` stays
quick.
"""
from __future__ import annotations

from rlbench import experiments
from rlbench.core.schedules import SCHEDULES, by_role
from rlbench.core.schedules.spec import BOUNDED, PERIODIC, REFERENCE

# The schedules by their role in these tables (each record says its role, core/schedules/).
_REF, _ASYNC, _BOUNDED = by_role(REFERENCE).name, by_role(PERIODIC).name, by_role(BOUNDED).name
REF_SW = {"schedule": _REF}
ASYNC_SW = {"schedule": _ASYNC}
BARRIER_SW = {**ASYNC_SW, "overlap": False}
BOUNDED_SW = {"schedule": _BOUNDED}

# Config overrides a cell's run.workload lays over the run's config (a regime point): the
# experiments' records.
WORKLOADS: dict[str, dict] = experiments.workloads()

# name -> [(cell name, engine switches)]; the first cell is the reference for speedups. The built-in
# ablations compare switches with no analysis of their own (the speedups and intervals every run
# gets); the experiments (bench/experiments/<name>/: cells, analysis, report section) add theirs
# from the registry.
ABLATIONS: dict[str, list[tuple[str, dict]]] = {
    "async": [(_REF, REF_SW), (f"{_ASYNC}_barrier", BARRIER_SW), (_ASYNC, ASYNC_SW)],
    "tri_model": [(_REF, REF_SW), (f"{_REF}+tri_model", {**REF_SW, "tri_model": True}),
                  (_ASYNC, ASYNC_SW), (f"{_ASYNC}+tri_model", {**ASYNC_SW, "tri_model": True})],
    # +shared_prompt: the default layout (dense); _gather: the layout before it; _auto: the cost
    # model's choice.
    "shared_prompt": [(_REF, REF_SW), (f"{_REF}+shared_prompt", {**REF_SW, "shared_prompt": True}),
                      (f"{_REF}+shared_prompt_gather",
                       {**REF_SW, "shared_prompt": True, "shared_prompt_impl": "gather"}),
                      (f"{_REF}+shared_prompt_auto", {**REF_SW, "shared_prompt": "auto"}),
                      (_ASYNC, ASYNC_SW),
                      (f"{_ASYNC}+shared_prompt", {**ASYNC_SW, "shared_prompt": True}),
                      (f"{_ASYNC}+shared_prompt_auto", {**ASYNC_SW, "shared_prompt": "auto"})],
    "all": [(_REF, REF_SW), (f"+{_ASYNC}", ASYNC_SW),
            ("+tri_model", {**ASYNC_SW, "tri_model": True}),
            ("+shared_prompt", {**ASYNC_SW, "tri_model": True, "shared_prompt": True}),
            (f"{_REF}+tri_model", {**REF_SW, "tri_model": True}),
            (f"{_REF}+tri_model+shared_prompt",
             {**REF_SW, "tri_model": True, "shared_prompt": True})],
    # The CI benchmark's cells (scripts/ci_bench.sh): the async chain of `all`, every switch pair
    # that `rlbench check` compares (schedule, tri_model, shared_prompt) once, nothing twice: fewer
    # cells, more iterations each in the CI budget.
    "ci": [(_REF, REF_SW), (f"+{_ASYNC}", ASYNC_SW),
           ("+tri_model", {**ASYNC_SW, "tri_model": True}),
           ("+shared_prompt", {**ASYNC_SW, "tri_model": True, "shared_prompt": True})],
    "staleness": [(_REF, REF_SW), (_ASYNC, ASYNC_SW)]
    + [(f"bounded_k{k}_{prox}", {**BOUNDED_SW, "max_staleness": k, "prox_logp": prox})
       for k in (1, 2, 4) for prox in ("recompute", "loglinear")],
    **experiments.ablations(),
}


def add_schedule_cells(table: dict, specs) -> dict:
    """The schedules' own cells (each record's `cells`), added at the end of the ablations they
    name."""
    for spec in specs:
        for name, cells in spec.cells.items():
            table.setdefault(name,
                             []).extend((cell, {"schedule": spec.name, **sw}) for cell, sw in cells)
    return table


add_schedule_cells(ABLATIONS, SCHEDULES.values())
# What each ablation compares: the `--ablation` help of `rlbench run` is made from this and
# ABLATIONS.
ABOUT = {"async": "the default: sync, its device split alone (barrier), periodic asynchrony",
         "tri_model": "the tri-model log-probs off and on, under both schedules",
         "shared_prompt": "shared-prompt packing off, on (dense; gather on sync) and auto, under "
                          "both schedules",
         "all": "the optimisations one after another, then on sync",
         "ci": "the CI benchmark",
         "staleness": "bounded staleness k = 1, 2, 4 with both pi_prox methods",
         **experiments.about()}


def describe(name: str) -> str:
    """`name (what it compares, N cells)`, for `rlbench run --help`."""
    n = len(ABLATIONS[name])
    return f"{name} ({ABOUT[name] + ', ' if name in ABOUT else ''}{n} cell{'s' * (n != 1)})"


def help_text() -> str:
    return ("Cells to run: " + ", ".join(describe(n) for n in ABLATIONS)
            + ", or none (just the configured engine).")
