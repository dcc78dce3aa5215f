"""Built-in task: seeded grade-school arithmetic word problems in GSM8K's answer format.

A problem is a running quantity changed by 1..N steps (+, -, small *). The solution has one
`a<op>b=c` line per step and ends with `#### c`, so the GSM8K rule reward scores it unchanged.
Step counts are skewed (most short, a long tail of long ones): the long responses are what make
synchronous RL idle, which is the effect rlbench measures. Text is plain ASCII with a small
vocabulary because a tiny character-level model has to learn it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator, Sequence

LIMIT = 1000  # every intermediate value stays in [0, LIMIT)

# (name, subject pronoun, object pronoun)
NAMES = [("Tom", "he", "him"), ("Ann", "she", "her"), ("Sam", "he", "him"), ("Mia", "she", "her"),
         ("Ben", "he", "him"), ("Lily", "she", "her"), ("Max", "he", "him"), ("Eva", "she", "her"),
         ("Leo", "he", "him"), ("Zoe", "she", "her"), ("Jack", "he", "him"), ("Emma", "she", "her")]
OBJECTS = ["apples", "pens", "cards", "eggs", "books", "shells", "cookies", "stickers", "marbles",
           "toys", "stamps", "beads"]
BOXES = ["bags", "boxes", "packs", "jars", "cases"]
GOODS = ["cups", "cakes", "pies", "kites", "hats"]  # what is sold when counting money

# Sentence templates per theme. {P}/{p}: pronoun, {o}: object pronoun, {O}: another name,
# {x}: the item count text ("5" or "$5"), {k}: small factor.
ITEMS = {
    "start": ["{N} has {x} {obj}."],
    "start_mul": ["{N} buys {a} {box} of {b} {obj}.", "{N} has {a} {box} with {b} {obj} each."],
    "+": ["{P} finds {x} more.", "{P} buys {x} more.", "{O} gives {o} {x} more.",
          "{P} gets {x} more."],
    "-": ["{P} gives {x} to {O}.", "{P} loses {x}.", "{P} sells {x}.", "{P} uses {x}."],
    "*": ["Then {p} has {k} times as many."],
    "question": ["How many {obj} does {N} have now?", "How many {obj} does {N} have?"],
}
MONEY = {
    "start": ["{N} has {x}."],
    "start_mul": ["{N} sells {a} {goods} for ${b} each."],
    "+": ["{P} earns {x}.", "{O} gives {o} {x}.", "{P} finds {x}."],
    "-": ["{P} spends {x}.", "{P} gives {x} to {O}.", "{P} pays {x} for lunch."],
    "*": ["Then {p} has {k} times as much."],
    "question": ["How much money does {N} have now?", "How many dollars does {N} have?"],
}


@dataclass
class Problem:
    question: str
    solution: str  # "5+3=8\n8-2=6\n#### 6"
    answer: str  # "6"


def _step_count(rng: random.Random, lo: int, hi: int) -> int:
    """Geometric-like: each extra step half as likely, so most problems are short, a few long."""
    counts = list(range(lo, hi + 1))
    return rng.choices(counts, weights=[0.5 ** i for i in range(len(counts))])[0]


def _one(rng: random.Random, steps: int, max_number: int, max_operand: int | None = None,
         operators: str = "+-*") -> Problem:
    """max_operand: largest number a step adds or subtracts (default max_number; the start and the
    start product's factor still go up to max_number). operators: the steps allowed; without `*` no
    problem starts with a product either."""
    step_max = max_operand or max_number
    theme = rng.choice([ITEMS, ITEMS, MONEY])  # items twice as often as money
    name, subj, obj_pron = rng.choice(NAMES)
    other = rng.choice([n for n, _, _ in NAMES if n != name])
    money = theme is MONEY
    fill = dict(N=name, P=subj.capitalize(), p=subj, o=obj_pron, O=other, obj=rng.choice(OBJECTS),
                box=rng.choice(BOXES), goods=rng.choice(GOODS))
    qty = (lambda v: f"${v}") if money else str

    sentences, lines = [], []
    # start with a product: "buys 3 bags of 4 apples" -> 3*4=12
    if "*" in operators and rng.random() < 0.3:
        a, b = rng.randint(2, 5), rng.randint(2, max_number)
        value = a * b
        sentences.append(rng.choice(theme["start_mul"]).format(a=a, b=b, **fill))
        lines.append(f"{a}*{b}={value}")
    else:
        value = rng.randint(1, max_number)
        sentences.append(rng.choice(theme["start"]).format(x=qty(value), **fill))
    while len(lines) < steps:
        ops = ["+",
               "+"] + (["-", "-"] if value > 0 else []) + (["*"] if 0 < value * 2 < LIMIT else [])
        op = rng.choice([o for o in ops if o in operators])
        if op == "*":
            k = rng.choice([f for f in (2, 3) if value * f < LIMIT])
            new = value * k
            sentences.append(rng.choice(theme["*"]).format(k=k, **fill))
        else:
            b = rng.randint(1, min(step_max, value) if op == "-" else step_max)
            if op == "+" and value + b >= LIMIT:
                continue
            k, new = b, value + b if op == "+" else value - b
            sentences.append(rng.choice(theme[op]).format(x=qty(b), **fill))
        lines.append(f"{value}{op}{k}={new}")
        value = new
    sentences.append(rng.choice(theme["question"]).format(**fill))
    return Problem(" ".join(sentences), "\n".join(lines + [f"#### {value}"]), str(value))


def problem_stream(rng: random.Random, min_steps: int, max_steps: int, max_number: int,
                   max_operand: int | None = None, operators: str = "+-*") -> Iterator[Problem]:
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    if max_number < 2:
        raise ValueError(f"max_number must be >= 2, got {max_number}")
    if "+" not in operators or set(operators) - set("+-*"):
        raise ValueError(f"operators must hold '+' and only '+', '-', '*', got {operators!r}")
    while True:
        yield _one(rng, _step_count(rng, min_steps, max_steps), max_number, max_operand, operators)


@dataclass(frozen=True)
class TaskShape:
    """What problems the built-in task draws: steps per problem, number range, operators."""
    min_steps: int = 1
    max_steps: int = 4
    max_number: int = 20
    max_operand: int | None = None
    operators: str = "+-*"

    @classmethod
    def of(cls, dcfg) -> "TaskShape":
        """From the data config (data.min_steps, max_steps, max_number, max_operand, operators)."""
        return cls(dcfg.min_steps, dcfg.max_steps, dcfg.max_number, dcfg.max_operand,
                   dcfg.operators)

    def stream(self, rng: random.Random) -> Iterator[Problem]:
        return problem_stream(rng, self.min_steps, self.max_steps, self.max_number,
                              self.max_operand, self.operators)


def generate_problems(n: int, seed: int | str, min_steps: int = 1, max_steps: int = 4,
                      max_number: int = 20) -> list[Problem]:
    """n problems, the same for the same arguments (own RNG, never global state)."""
    gen = problem_stream(random.Random(seed), min_steps, max_steps, max_number)
    return [next(gen) for _ in range(n)]


def builtin_splits(train_size: int, eval_size: int, seed: int, min_steps: int = 1,
                   max_steps: int = 4,
                   max_number: int = 20) -> tuple[list[Problem], list[Problem]]:
    """(train, eval): eval from its own seed stream; train skips any question eval holds."""
    evl = generate_problems(eval_size, stream_seed("eval", seed), min_steps, max_steps, max_number)
    held_out = {p.question for p in evl}
    gen = problem_stream(random.Random(seed), min_steps, max_steps, max_number)
    train: list[Problem] = []
    tries = 0
    while len(train) < train_size:
        tries += 1
        if tries > 100 * (train_size + 10):  # bounded: a tiny problem space must not hang
            raise ValueError(f"could not draw {train_size} train problems disjoint from eval; "
                             f"widen the task")
        p = next(gen)
        if p.question not in held_out:
            train.append(p)
    return train, evl


def answer_only(solution: str) -> str:
    """The solution without its working: "5+3=8\n8-2=6\n#### 6" -> "#### 6" (chat-style endings
    kept)."""
    return solution.rsplit("\n", 1)[-1]


def few_shot_examples(k: int, seed: int) -> list[Problem]:
    """k solved examples for the prompt, from a seed stream apart from train and eval."""
    return generate_problems(k, stream_seed("shots", seed))


def format_prompt(question: str, shots: Sequence[Problem] = ()) -> str:
    """Plain-text prompt the model continues with its solution: "Q: ...\\nA: "."""
    examples = "".join(f"Q: {s.question}\nA: {s.solution}\n\n" for s in shots)
    return f"{examples}Q: {question}\nA: "


def stream_seed(stream: str, seed: int) -> str:
    # str seeds are hashed with SHA-512 by random.Random: stable across runs and PYTHONHASHSEED.
    return f"rlbench-task:{stream}:{seed}"
