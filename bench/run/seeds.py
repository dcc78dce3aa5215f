"""Multi-seed runs (`rlbench run --seeds 0,1,2`): every cell of the ablation once per seed.

A seed changes everything `run.seed` seeds: the data split, the warm start (cached per seed), the
initialisation and the sampling. Cells run seed by seed (every cell of the first seed, then the
next), so a run cut short still holds complete comparisons. The cell `sync` of seed 2 is
`sync@seed2` (schema.seeded_name); reports group by `sync` and aggregate over seeds
(analysis/seeds.py).
"""
from __future__ import annotations

from rlbench.core.config import RunConfig

from rlbench.core.config_files import with_overrides
from rlbench.core.errors import UserError
from rlbench.core.results.schema import seeded_name


def parse_seeds(text: str | None) -> list[int] | None:
    """'0,1,2' -> [0, 1, 2]; None or '' -> None (the config's run.seed, one run per cell)."""
    if not text:
        return None
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise UserError(
            f"--seeds {text!r}: expected comma-separated integers, e.g. --seeds 0,1,2"
        ) from None
    if len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {text!r}: each seed at most once")
    return seeds


def expand(cells: list[tuple[str, RunConfig]],
           seeds: list[int] | None) -> list[tuple[str, RunConfig, int | None]]:
    """(cell name, config, seed) for every cell x seed, seed-major. One seed sets run.seed and keeps
    the names; no seeds keeps the cells as they are (seed None: the config's run.seed)."""
    if not seeds:
        return [(name, cfg, None) for name, cfg in cells]
    named = (lambda n, s: n) if len(seeds) == 1 else seeded_name
    return [(named(name, s), with_overrides(cfg, {"run": {"seed": s}}), s) for s in seeds
            for name, cfg in cells]
