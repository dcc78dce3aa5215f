"""Built-in task: deterministic, disjoint splits, correct arithmetic, a long tail of long problems."""
import collections
import re
import string

from rlbench.engines.data.reward import gsm8k_reward
from rlbench.engines.data.task import builtin_splits, few_shot_examples, format_prompt, generate_problems

LINE = re.compile(r"^(\d+)([+\-*])(\d+)=(\d+)$")
ALLOWED = set(string.ascii_letters + string.digits + " .,?$\n")


def test_same_seed_same_problems_other_seed_differs():
    assert generate_problems(50, seed=7) == generate_problems(50, seed=7)
    assert generate_problems(50, seed=7) != generate_problems(50, seed=8)


def test_splits_are_deterministic_and_disjoint():
    train, evl = builtin_splits(2000, 200, seed=3, min_steps=1, max_steps=4, max_number=20)
    assert (len(train), len(evl)) == (2000, 200)
    assert not {p.question for p in train} & {p.question for p in evl}
    assert builtin_splits(2000, 200, 3, 1, 4, 20) == (train, evl)
    # eval comes from its own stream, not the head of the train stream
    assert evl != generate_problems(200, seed=3)


def test_few_shot_stream_is_apart_from_train_and_eval():
    shots = few_shot_examples(4, seed=3)
    train, evl = builtin_splits(500, 50, seed=3)
    assert len(shots) == 4 and shots == few_shot_examples(4, seed=3)
    assert shots != train[:4] and shots != evl[:4]


def test_solutions_are_correct_arithmetic():
    for p in generate_problems(2000, seed=11, max_steps=6):
        *steps, last = p.solution.split("\n")
        assert last == f"#### {p.answer}"
        prev = None
        for line in steps:
            a, op, b, c = LINE.match(line).groups()
            a, b, c = int(a), int(b), int(c)
            assert c == {"+": a + b, "-": a - b, "*": a * b}[op]
            assert 0 <= c < 1000
            assert prev is None or a == prev  # each step continues from the last result
            prev = c
        assert str(prev) == p.answer
        assert gsm8k_reward(p.solution, p.answer) == 1.0


def test_step_counts_have_a_long_tail():
    counts = collections.Counter(p.solution.count("\n") for p in generate_problems(4000, seed=0))
    assert set(counts) == {1, 2, 3, 4}
    assert counts[1] > counts[2] > counts[3] > counts[4] > 100  # most short, yet long ones are common
    assert counts[1] > 0.4 * 4000
    one = generate_problems(200, seed=0, min_steps=3, max_steps=3)
    assert {p.solution.count("\n") for p in one} == {3}


def test_text_is_plain_ascii_and_short():
    for p in generate_problems(2000, seed=5):
        assert set(p.question) <= ALLOWED, p.question
        assert set(p.solution) <= set(string.printable)
        assert len(p.question) < 200


def test_format_prompt_puts_shots_first():
    shots = few_shot_examples(2, seed=0)
    prompt = format_prompt("How many?", shots)
    assert prompt.startswith(f"Q: {shots[0].question}\nA: {shots[0].solution}\n\nQ: {shots[1].question}")
    assert prompt.endswith("\n\nQ: How many?\nA: ")
    assert format_prompt("How many?") == "Q: How many?\nA: "


def test_the_default_stream_is_unchanged_by_the_operators_option():
    """data.operators (split fact) must not move the problems every other config draws: pinned digest."""
    import hashlib

    drawn = [(p.question, p.solution) for p in generate_problems(300, 5, 1, 6, 99)]
    assert hashlib.sha256(repr(drawn).encode()).hexdigest()[:16] == "4af79f654735707f"


def test_operators_without_products_draw_none():
    import random

    from rlbench.engines.data.task import TaskShape

    stream = TaskShape(1, 3, 99, 3, "+-").stream(random.Random(0))
    problems = [next(stream) for _ in range(500)]
    ops = {LINE.match(line).group(2) for p in problems for line in p.solution.split("\n")[:-1]}
    assert ops == {"+", "-"}
    assert {LINE.match(p.solution.split("\n")[0]).group(2) for p in problems} == {"+", "-"}  # no product start


def test_answer_only_leaves_the_working_out():
    from rlbench.engines.data.task import answer_only

    assert answer_only("5+3=8\n8-2=6\n#### 6") == "#### 6"
    assert answer_only("#### 6") == "#### 6"
