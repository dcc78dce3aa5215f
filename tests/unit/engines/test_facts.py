"""The built-in task split by fact (data.split fact): no evaluation step's fact, in any direction, occurs in
the data the model trains on (RL prompts, warm start, few-shot examples), checked on the generated data."""
import re

import pytest

from conftest import ROOT
from rlbench.core.config_files import load_config
from rlbench.engines.data.facts import fact_splits, is_heldout, side, step_facts
from rlbench.engines.data.reward import gsm8k_reward
from rlbench.engines.data.source import load_dataset
from rlbench.engines.data.task import Problem, TaskShape

HELDOUT = ROOT / "configs" / "cpu-heldout.yaml"
LINE = re.compile(r"^(\d+)([+\-*/])(\d+)=(\d+)$")
RESULT = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


def forms(a: int, op: str, b: int, c: int, inverses: bool = True) -> set[str]:
    """Every way to write the step a<op>b=c: both operand orders and (inverses) the inverse operations,
    so 17+3=20 gives 17+3, 3+17, 20-3, 20-17. inverses=False is the rule the split used to follow."""
    if not inverses:
        return {f"{a}{op}{b}", f"{b}{op}{a}"} if op in "+*" else {f"{a}{op}{b}"}
    if op in "-/":  # c = a - b is a = c + b; c = a / b is a = c * b
        a, op, b, c = c, "+" if op == "-" else "*", b, a
    return {f"{a}{op}{b}", f"{b}{op}{a}"} | {f"{c}{'-' if op == '+' else '/'}{x}" for x in (a, b)}


def computations(problems, inverses: bool = True) -> set[str]:
    """Every step of every solution in all its forms: parsed here from the text, apart from
    facts.step_facts, so a bug there cannot hide a leak. Two steps are the same fact iff their forms meet."""
    out = set()
    for p in problems:
        for line in p.solution.split("\n")[:-1]:
            a, op, b, c = LINE.match(line).groups()
            assert RESULT[op](int(a), int(b)) == int(c), line  # the text is right arithmetic
            out |= forms(int(a), op, int(b), int(c), inverses)
    return out


def leaks(trained, held) -> set[str]:
    """The held-out computations the training data holds in some form."""
    return computations(held) & computations(trained)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_heldout_config_eval_facts_never_occur_in_training(seed):
    cfg = load_config(HELDOUT, [f"run.seed={seed}", "data.few_shot=3"])
    ds = load_dataset(cfg.data, seed)
    assert (len(ds.train), len(ds.eval), len(ds.seen)) == (cfg.data.train_size, cfg.data.eval_size,
                                                           cfg.data.eval_size)
    trained = ds.train + ds.shots  # the warm start draws from ds.train
    assert computations(ds.eval) and not leaks(trained, ds.eval)
    # the seen-fact set: trained facts only (in some form), in questions the train split does not hold
    assert computations(ds.seen) <= computations(trained)
    assert not {p.question for p in ds.seen} & {p.question for p in ds.train}
    # the answer format and the reward are the built-in task's
    for p in ds.eval + ds.seen:
        assert p.solution.endswith(f"#### {p.answer}") and gsm8k_reward(p.solution, p.answer) == 1.0


def test_a_leak_is_caught():
    """The check above can fail: a train problem moved into eval shares its facts with training."""
    train, evl, _ = fact_splits(400, 40, 0, TaskShape(1, 1, 20), share=0.25)
    assert not leaks(train, evl)
    assert leaks(train, evl + train[:1])


def test_an_inverse_leak_is_caught():
    """A train step that is a held-out step run backwards (held out 20-3=17, trained 17+3=20) is a leak;
    operand orders alone, the rule the split used to follow, miss it."""
    train, evl, _ = fact_splits(400, 40, 0, TaskShape(1, 1, 99, operators="+-"), share=0.25)
    old_rule = computations(evl, inverses=False)
    steps = [LINE.match(p.solution.split("\n")[0]).groups() for p in evl]
    a, _, b, c = next(s for s in steps if s[1] == "-" and f"{s[3]}+{s[2]}" not in old_rule)
    planted = Problem("Tom has some apples.", f"{c}+{b}={a}\n#### {a}", a)  # held out a-b=c, trained c+b=a
    assert not leaks(train, evl) and leaks(train + [planted], evl)
    assert not computations([planted], inverses=False) & old_rule


def test_inverses_are_one_fact_and_each_fact_is_on_one_side():
    assert step_facts("5+3=8\n8*2=16\n#### 16") == [("+", (3, 5, 8)), ("*", (2, 8, 16))]
    same = ["17+3=20", "3+17=20", "20-3=17", "20-17=3"]
    assert {tuple(step_facts(s + "\n#### 0")) for s in same} == {(("+", (3, 17, 20)),)}
    assert step_facts("20/4=5\n#### 5") == step_facts("4*5=20\n#### 20") == [("*", (4, 5, 20))]
    assert step_facts("2+4=6\n#### 6") != step_facts("2*3=6\n#### 6")  # the family tells sums from products
    for seed in range(5):
        assert len({is_heldout(step_facts(s + "\n#### 0")[0], seed, 0.5) for s in same}) == 1


def test_split_is_seeded_and_about_the_share():
    facts = [("+", (a, b, a + b)) for a in range(1, 60) for b in range(a, 60)]
    held0 = {f for f in facts if is_heldout(f, 0, 0.25)}
    assert 0.2 < len(held0) / len(facts) < 0.3
    assert held0 == {f for f in facts if is_heldout(f, 0, 0.25)}
    assert held0 != {f for f in facts if is_heldout(f, 1, 0.25)}  # another seed holds out other facts
    a = fact_splits(300, 30, 4, TaskShape(1, 2, 20), share=0.3)
    assert a == fact_splits(300, 30, 4, TaskShape(1, 2, 20), share=0.3)


def test_multi_step_problems_are_whole_on_one_side():
    train, evl, seen = fact_splits(300, 30, 1, TaskShape(2, 3, 20), share=0.4)
    assert all(len(step_facts(p.solution)) >= 2 for p in evl)
    assert {side(p, 1, 0.4) for p in evl} == {"heldout"}
    assert {side(p, 1, 0.4) for p in train + seen} == {"train"}


def test_fact_split_needs_the_builtin_task():
    with pytest.raises(Exception, match="data.split"):
        load_config(HELDOUT, ["data.source=gsm8k", "data.path=x.jsonl"])


def test_text_split_is_unchanged_by_default():
    cfg = load_config(ROOT / "configs" / "cpu-default.yaml", [])
    assert cfg.data.split == "text" and load_dataset(cfg.data, 0).seen == []


def test_a_new_split_rule_retires_cached_warm_starts(monkeypatch):
    """The warm start trains on the train split: a changed rule (facts.SPLIT_VERSION) must change its cache
    key, whatever else the key holds, or a run would load weights trained on the old split's facts."""
    from rlbench.engines.data import facts
    from rlbench.engines.model.tiny import cache_key

    cfg = load_config(HELDOUT, [])
    before = cache_key(cfg)
    monkeypatch.setattr(facts, "SPLIT_VERSION", facts.SPLIT_VERSION + 1)
    assert cache_key(cfg) != before
