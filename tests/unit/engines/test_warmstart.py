"""The tiny model's warm-start data: solutions end GSM8K-style or chat-style in the configured share."""
import pytest

from rlbench.engines.data.reward import any_format_correct, extract_solution, gsm8k_reward
from rlbench.engines.data.task import format_prompt, generate_problems
from rlbench.engines.model.tiny import _sft_batch, chat_style
from rlbench.engines.model.tokenizer import CharTokenizer


def test_chat_style_keeps_the_work_and_hides_the_answer_from_the_strict_rule():
    for p in generate_problems(50, seed=1):
        text = chat_style(p.solution, p.answer)
        assert text.split("\n")[:-1] == p.solution.split("\n")[:-1]  # the same worked lines
        assert text.endswith(f"The answer is {p.answer}.")
        assert extract_solution(text) is None and gsm8k_reward(text, p.answer) == 0.0
        assert any_format_correct(text, p.answer)


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_warm_start_targets_follow_the_share(share):
    import random

    tok = CharTokenizer()
    problems = generate_problems(400, seed=2)
    rng = random.Random(0)
    styles = [rng.random() < share for _ in problems]
    ids, labels = _sft_batch(tok, problems, format_prompt, styles)
    targets = [tok.decode([t for t in row.tolist() if t != -100]) for row in labels]
    gsm8k = [extract_solution(t) is not None for t in targets]
    assert gsm8k == styles
    assert sum(gsm8k) / len(gsm8k) == pytest.approx(share, abs=0.07)
    assert all(any_format_correct(t, p.answer) for t, p in zip(targets, problems))


def test_cache_key_covers_what_shapes_the_warm_start(tmp_path):
    from rlbench.core.config_files import load_config
    from rlbench.engines.model.tiny import cache_key

    key = lambda *sets: cache_key(load_config(None, list(sets)))  # noqa: E731
    base = key()
    assert key() == base
    assert key("data.few_shot=5") == base  # warm-start prompts are zero-shot
    for change in ("data.eval_size=64", "data.max_steps=3", "model.warmstart_gsm8k_share=1.0", "run.seed=1",
                   "model.warmstart_steps=10", "model.warmstart_direct_share=0.5"):
        assert key(change) != base, change
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "q", "answer": "#### 1"}\n')
    first = key("data.source=gsm8k", f"data.path={data}")
    data.write_text('{"question": "q", "answer": "#### 2"}\n')
    assert key("data.source=gsm8k", f"data.path={data}") != first  # same path, other content


def test_cache_key_changes_with_every_source_file_and_library_version(monkeypatch):
    """The code and libraries that shape the weights are in the key: the tokenizer, the data source, the
    task, this warm start (each file's code), torch and transformers (an A/B run whose two trees differ in
    any of them must not share a warm start)."""
    from pathlib import Path

    from rlbench.core.config_files import load_config
    from rlbench.engines.model import tiny

    cfg = load_config(None, [])
    base = tiny.cache_key(cfg)
    names = {f"{f.parent.name}/{f.name}" for f in tiny.warmstart_sources()}
    assert {"model/tokenizer.py", "model/tiny.py", "data/source.py", "data/task.py", "data/facts.py"} <= names
    real = Path.read_text
    for f in tiny.warmstart_sources():
        monkeypatch.setattr(Path, "read_text", lambda self, *a, f=f, **k: "changed = 1\n" if self == f
                            else real(self, *a, **k))
        assert tiny.cache_key(cfg) != base, f
    monkeypatch.setattr(Path, "read_text", real)
    assert tiny.cache_key(cfg) == base
    # the modules the key reads: `import transformers` here can be another object than tiny's (transformers'
    # lazy module is replaced in sys.modules once some of its submodules load)
    monkeypatch.setattr(tiny.transformers, "__version__", "0.0.1")
    assert tiny.cache_key(cfg) != base
    monkeypatch.undo()
    monkeypatch.setattr(tiny.torch, "__version__", "0.0.1")
    assert tiny.cache_key(cfg) != base


def test_every_module_a_warm_start_runs_is_in_the_cache_key(tmp_path):
    """Run a (2-step) warm start in a fresh process and list the rlbench engine modules it imported: each
    one's source must be among the key's inputs, so a new module on the warm start's path cannot be missed."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json, sys\n"
            "def engine_files(): return {m.__file__ for n, m in sys.modules.items() if n.startswith('rlbench.engines.')}\n"
            "from rlbench.core.config_files import load_config\n"
            "cfg = load_config(None, ['model.warmstart_steps=2', 'data.train_size=64'])\n"
            "config_time = engine_files()\n"
            "from rlbench.engines.data.source import load_dataset\n"
            "from rlbench.engines.model.loader import load_policy\n"
            "from rlbench.engines.model.tiny import warmstart_sources\n"
            "load_policy(cfg, load_dataset(cfg.data, cfg.run.seed))\n"
            "print(json.dumps({'config': sorted(config_time), 'ran': sorted(engine_files() - config_time),\n"
            "                  'key': sorted(map(str, warmstart_sources()))}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RLBENCH_CACHE": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert any(f.endswith("tokenizer.py") for f in got["ran"])  # the warm start really ran through them
    assert set(got["ran"]) <= set(got["key"]), set(got["ran"]) - set(got["key"])
    # Loading the config imports the schedules' records (their options are the engine.* sections, which the
    # warm start reads none of, so the key leaves them out); any other engine module there must be keyed too.
    assert all("/engines/schedules/" in f for f in set(got["config"]) - set(got["key"])), got["config"]


def test_direct_answers_leave_the_working_out_in_the_configured_share():
    """model.warmstart_direct_share: that share of the problems is answered `#### N` alone, the same problems
    every epoch; with a chat-style ending a direct answer is `The answer is N.` alone."""
    import random

    from rlbench.engines.model.tiny import _answer_directly

    problems = generate_problems(1000, seed=3)
    direct = _answer_directly(problems, 0.4, random.Random(0))
    assert direct == _answer_directly(problems, 0.4, random.Random(0))
    alone = [d.solution == f"#### {p.answer}" for d, p in zip(direct, problems)]
    assert sum(alone) / len(alone) == pytest.approx(0.4, abs=0.05)
    assert all(d.solution == p.solution for d, p, a in zip(direct, problems, alone) if not a)
    assert _answer_directly(problems, 0.0, random.Random(0)) == problems
    assert chat_style("#### 6", "6") == "The answer is 6."
