"""The built-in task split by arithmetic fact, not by text (`data.split: fact`).

A fact is an operation together with its inverses: `17+3=20`, `3+17=20`, `20-3=17` and `20-17=3` are
one fact, and so are `4*5=20`, `5*4=20`, `20/4=5` and `20/5=4`. A model that trained on `17+3=20`
has seen the numbers of `20-3=17` in one relation, so holding out one direction while training the
other would count a seen computation as new. A fact's key is its family (`+` for + and -, `*` for *
and /) with its three numbers sorted: every form of the fact maps to the same key, and no two facts
share one (in `+` the largest number is the sum of the other two, in `*` their product).

Every fact is assigned to one side by a seeded hash: held out with probability `data.heldout_share`.
Three problem sets come from the task's generator (task.py, unchanged, so the questions, the answer
format and the reward are the built-in task's):
  - train (also the warm start's data and the few-shot examples): every step's fact on the train
    side;
  - eval (held out): every step's fact held out, so pass@1 on it counts computations the model never
    saw in any direction, in RL or in the warm start;
  - seen: every step's fact one that occurs in train, questions train does not hold: pass@1 on it is
    the seen-fact accuracy, which memorisation alone can raise.
Problems that mix sides are dropped. A problem's result (the `#### N` number) may appear in training
as a number of another fact: numbers alone are not facts.
"""
from __future__ import annotations

import hashlib
import random
import re
from typing import Iterator

from rlbench.engines.data.task import Problem, TaskShape, stream_seed

# Bumped whenever the split's rule changes, so cached warm starts trained on an older split are not
# reused (engines/model/tiny.py's cache key holds it). 2: inverses are one fact (1: operand orders
# only).
SPLIT_VERSION = 2

Fact = tuple[str, tuple[int, int, int]]  # (family, the three numbers sorted): ("+", (3, 17, 20))
_STEP = re.compile(r"^(\d+)([+\-*/])(\d+)=(\d+)$")
_FAMILY = {"+": "+", "-": "+", "*": "*", "/": "*"}


def step_facts(solution: str) -> list[Fact]:
    """The facts of a solution's steps, in order: "3+5=8\\n8*2=16\\n#### 16" -> [('+', (3, 5, 8)),
    ('*', (2, 8, 16))]; "8-5=3" gives ('+', (3, 5, 8)) too."""
    facts = []
    for line in solution.splitlines():
        m = _STEP.match(line.strip())
        if m:
            a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
            facts.append((_FAMILY[op], tuple(sorted((a, b, c)))))
    return facts


def is_heldout(fact: Fact, seed: int, share: float) -> bool:
    """Whether the fact is on the held-out side for this seed: a stable hash (not Python's salted
    one)."""
    family, (x, y, z) = fact
    digest = hashlib.sha256(f"rlbench-facts:{seed}:{family}:{x},{y},{z}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64 < share


def side(problem: Problem, seed: int, share: float) -> str:
    """'train', 'heldout', or 'mixed' (steps on both sides)."""
    held = {is_heldout(f, seed, share) for f in step_facts(problem.solution)}
    return "heldout" if held == {True} else "train" if held == {False} else "mixed"


def _draw(stream: Iterator[Problem], n: int, want: str, seed: int, share: float, skip: set[str],
          known: set[Fact] | None = None) -> list[Problem]:
    """n problems of the stream on side `want` whose questions are not in skip (and, given `known`,
    whose facts all are in it); bounded, never hangs."""
    out: list[Problem] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 1000 * (n + 10):
            raise ValueError(f"could not draw {n} {want}-fact problems "
                             f"(data.heldout_share={share}); "
                             "raise data.heldout_share or data.max_number, or lower data.max_steps")
        p = next(stream)
        if p.question not in skip and side(p, seed, share) == want and (
                known is None or set(step_facts(p.solution)) <= known):
            out.append(p)
    return out


def fact_splits(train_size: int, eval_size: int, seed: int, shape: TaskShape,
                share: float) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """(train, held-out eval, seen-fact eval), each set from its own seed stream."""
    if not 0 < share < 1:
        raise ValueError(f"heldout_share must be in (0, 1), got {share}")

    def stream(name: str):
        return shape.stream(random.Random(stream_seed(name, seed)))

    heldout = _draw(stream("eval"), eval_size, "heldout", seed, share, set())
    own = shape.stream(random.Random(seed))
    train = _draw(own, train_size, "train", seed, share, set())
    # train-side facts the split really holds
    trained = {f for p in train for f in step_facts(p.solution)}
    seen = _draw(stream("seen"), eval_size, "train", seed, share, {p.question for p in train},
                 trained)
    return train, heldout, seen


def fact_shots(k: int, seed: int, share: float, dcfg) -> list[Problem]:
    """k few-shot examples of the configured task (data config dcfg) on the train side: the prompt
    must not show a held-out fact either."""
    stream = TaskShape.of(dcfg).stream(random.Random(stream_seed("shots", seed)))
    return _draw(stream, k, "train", seed, share, set())
