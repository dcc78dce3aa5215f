"""The built-in task split by fact (data.split fact): no evaluation step's operands and operator occur in
the data the model trains on (RL prompts, warm start, few-shot examples), checked on the generated data."""
import re

import pytest

from conftest import ROOT
from rlbench.config import load_config
from rlbench.engines.data.facts import fact_splits, is_heldout, side, step_facts
from rlbench.engines.data.reward import gsm8k_reward
from rlbench.engines.data.source import load_dataset
from rlbench.engines.data.task import TaskShape

HELDOUT = ROOT / "configs" / "cpu-heldout.yaml"
LINE = re.compile(r"^(\d+)([+\-*])(\d+)=(\d+)$")


def computations(problems) -> set[str]:
    """Every step as text, both operand orders for + and * ("3+5" and "5+3"): parsed here, apart from
    facts.step_facts, so a bug there cannot hide a leak."""
    out = set()
    for p in problems:
        for line in p.solution.split("\n")[:-1]:
            a, op, b, c = LINE.match(line).groups()
            assert {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op] == int(c)
            out.add(f"{a}{op}{b}")
            if op in "+*":
                out.add(f"{b}{op}{a}")
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_heldout_config_eval_facts_never_occur_in_training(seed):
    cfg = load_config(HELDOUT, [f"run.seed={seed}", "data.few_shot=3"])
    ds = load_dataset(cfg.data, seed)
    assert (len(ds.train), len(ds.eval), len(ds.seen)) == (cfg.data.train_size, cfg.data.eval_size,
                                                           cfg.data.eval_size)
    trained = computations(ds.train) | computations(ds.shots)  # the warm start draws from ds.train
    held = computations(ds.eval)
    assert held and not held & trained
    # the seen-fact set: trained facts only, in questions the train split does not hold
    assert computations(ds.seen) <= trained
    assert not {p.question for p in ds.seen} & {p.question for p in ds.train}
    # the answer format and the reward are the built-in task's
    for p in ds.eval + ds.seen:
        assert p.solution.endswith(f"#### {p.answer}") and gsm8k_reward(p.solution, p.answer) == 1.0


def test_a_leak_is_caught():
    """The check above can fail: a train problem moved into eval shares its facts with training."""
    train, evl, _ = fact_splits(400, 40, 0, TaskShape(1, 1, 20), share=0.25)
    assert not computations(evl) & computations(train)
    assert computations(evl + train[:1]) & computations(train)


def test_commutative_facts_fall_on_one_side():
    assert step_facts("5+3=8\n8*2=16\n#### 16") == [(3, "+", 5), (2, "*", 8)]
    assert step_facts("3+5=8\n#### 8") == step_facts("5+3=8\n#### 8")
    assert step_facts("5-3=2\n#### 2") == [(5, "-", 3)]


def test_split_is_seeded_and_about_the_share():
    facts = [(a, "+", b) for a in range(1, 60) for b in range(a, 60)]
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
