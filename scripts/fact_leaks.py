"""Audit a fact split: how many held-out steps the training data holds, by operand order and by inverse.

    python scripts/fact_leaks.py --config configs/cpu-heldout.yaml --seeds 0,1,2

For each seed it draws the configured data (train, the few-shot examples, the held-out eval set) and
parses every solution step from the text itself, apart from engines/data/facts.py, so it audits the split
rather than restating it. A held-out step leaks when training holds the same computation:
  - "operand order": the step itself or with + / * operands swapped (`3+17` for `17+3`);
  - "any direction": also its inverses (`20-3=17` held out, `17+3=20` trained).
It prints one line per seed: held-out steps, the share leaking under each rule, and the eval problems
free of any leak. tests/unit/engines/test_facts.py asserts the same property (with its own copy of the parser).
"""
from __future__ import annotations

import argparse
import re

from rlbench.core.config_files import load_config
from rlbench.engines.data.source import load_dataset

LINE = re.compile(r"^(\d+)([+\-*/])(\d+)=(\d+)$")
INVERSE = {"+": "-", "*": "/"}


def steps(problem) -> list[tuple[int, str, int, int]]:
    """The solution's `a<op>b=c` lines: "17+3=20\\n#### 20" -> [(17, '+', 3, 20)]."""
    return [(int(a), op, int(b), int(c)) for a, op, b, c in
            (LINE.match(line).groups() for line in problem.solution.split("\n")[:-1])]


def forms(a: int, op: str, b: int, c: int, inverses: bool) -> set[str]:
    """Every way to write the step: swapped operands for + and *, and (inverses) the inverse operations."""
    if not inverses:
        return {f"{a}{op}{b}", f"{b}{op}{a}"} if op in "+*" else {f"{a}{op}{b}"}
    if op in "-/":  # a-b=c is c+b=a, a/b=c is c*b=a
        a, op, b, c = c, "+" if op == "-" else "*", b, a
    return {f"{a}{op}{b}", f"{b}{op}{a}", f"{c}{INVERSE[op]}{a}", f"{c}{INVERSE[op]}{b}"}


def audit(config: str, seed: int) -> dict:
    cfg = load_config(config, [f"run.seed={seed}"])
    ds = load_dataset(cfg.data, seed)
    trained = {rule: {f for p in ds.train + ds.shots for s in steps(p) for f in forms(*s, rule)}
               for rule in (False, True)}
    held = [s for p in ds.eval for s in steps(p)]
    leak = {rule: sum(bool(forms(*s, rule) & trained[rule]) for s in held) for rule in (False, True)}
    clean = sum(not any(forms(*s, True) & trained[True] for s in steps(p)) for p in ds.eval)
    return {"seed": seed, "steps": len(held), "order": leak[False] / len(held),
            "direction": leak[True] / len(held), "clean": clean, "problems": len(ds.eval)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/cpu-heldout.yaml")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds")
    args = ap.parse_args()
    for seed in (int(s) for s in args.seeds.split(",")):
        r = audit(args.config, seed)
        print(f"seed {r['seed']}: {r['steps']} held-out steps, leaking by operand order {r['order']:.1%}, "
              f"in any direction {r['direction']:.1%}; eval problems free of any leak {r['clean']}/{r['problems']}")


if __name__ == "__main__":
    main()
