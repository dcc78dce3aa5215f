"""The TRL peer's translation of a RunConfig (engines/external/trl/): the batch arithmetic of GRPOConfig, the
refusals, the rows TRL reads, the character tokenizer and the reward function. Fast: no training."""
import pytest

from conftest import TINY
from rlbench.core.config_files import load_config
from rlbench.engines.external.trl import settings
from rlbench.core.errors import UserError


def test_one_generation_per_iteration_and_its_steps():
    """CPU default on 2 ranks: 8 prompts x G=8 = 64 samples, 4 per micro-batch: 8 micro-batches per rank,
    one optimizer step per generation; with 2 mini-batches, 2 steps of 4 micro-batches per generation."""
    cfg = load_config(None, [])
    on = settings.grpo_kwargs(cfg, 2, "out")
    assert (on["per_device_train_batch_size"], on["gradient_accumulation_steps"], on["steps_per_generation"],
            on["max_steps"]) == (4, 8, 8, cfg.run.iterations)
    off = settings.grpo_kwargs(load_config(None, ["train.ppo_mini_batches=2"]), 2, "out")
    assert (off["gradient_accumulation_steps"], off["steps_per_generation"], off["max_steps"]) == \
        (4, 8, 2 * cfg.run.iterations)
    assert (on["beta"], on["epsilon"], on["epsilon_high"], on["delta"]) == \
        (cfg.train.kl_coef, cfg.train.clip_ratio, cfg.train.clip_ratio, cfg.train.clip_ratio_c)
    assert (on["loss_type"], on["use_bias_correction_kl"], on["bf16"], on["shuffle_dataset"]) == \
        ("dapo", False, False, False)
    assert (on["learning_rate"], on["adam_beta1"], on["adam_beta2"], on["lr_scheduler_type"]) == \
        (cfg.train.lr, *cfg.train.betas, "constant")


def test_grpo_config_accepts_the_translation(tmp_path):
    pytest.importorskip("trl")
    from trl import GRPOConfig

    cfg = load_config(TINY, [])
    args = GRPOConfig(**settings.named_for(GRPOConfig, settings.grpo_kwargs(cfg, 1, str(tmp_path))))
    assert args.generation_batch_size == cfg.batch_size  # one rank here: the whole iteration's samples
    assert not args.bf16 and args.top_k == 0 and args.num_generations == cfg.rollout.group_size


@pytest.mark.parametrize("sets, key", [
    (["train.kl_type=mse"], "train.kl_type"),
    (["rollout.response_length=lognormal"], "rollout.response_length"),
    (["engine.tri_model=true"], "engine.tri_model"),
    (["rollout.group_size=1", "train.micro_batch_size=1"], "rollout.group_size"),
    (["train.prompts_per_iteration=3", "train.ppo_mini_batches=2"], "train.ppo_mini_batches=2"),
])
def test_refusals_name_the_key(sets, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        settings.check(load_config(TINY, sets), 2)


def test_the_rows_are_rlbench_iterations_in_order():
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.external.trl.data import train_rows
    from rlbench.engines.factory import iteration_problems

    cfg = load_config(TINY, [])
    dataset = load_dataset(cfg.data, cfg.run.seed)
    rows = train_rows(cfg, dataset, chat=False)
    p = cfg.train.prompts_per_iteration
    assert len(rows) == cfg.run.iterations * p
    for k in range(cfg.run.iterations):
        problems = iteration_problems(cfg, dataset, k)
        assert [r["prompt"] for r in rows[k * p:(k + 1) * p]] == [dataset.prompt_text(q) for q in problems]
        assert [(r["iteration"], r["index"], r["answer"]) for r in rows[k * p:(k + 1) * p]] == \
            [(k, i, q.answer) for i, q in enumerate(problems)]
    chat = train_rows(cfg, dataset, chat=True)
    assert chat[0]["prompt"] == [{"role": "user", "content": rows[0]["prompt"]}]


def test_character_tokenizer_is_rlbench_tokenizer():
    """Prompt ids (BOS first), response decoding (special tokens dropped, every '?' kept) as CharTokenizer."""
    pytest.importorskip("tokenizers")
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.external.trl.export import char_tokenizer
    from rlbench.engines.model.tokenizer import CharTokenizer

    cfg = load_config(TINY, [])
    dataset = load_dataset(cfg.data, cfg.run.seed)
    ours, theirs = CharTokenizer(), char_tokenizer()
    for p in dataset.train[:50] + dataset.eval:
        text = dataset.prompt_text(p)
        assert theirs(text)["input_ids"] == ours.prompt_ids(text)
        ids = ours.encode(p.solution + " ok?\n")
        assert theirs.decode(ids + [ours.eos_token_id, ours.pad_token_id], skip_special_tokens=True) == \
            ours.decode(ids) == p.solution + " ok?\n"
    assert theirs("é")["input_ids"] == ours.prompt_ids("é")  # unknown characters read as '?'


def test_reward_function_is_the_strict_rule():
    from rlbench.engines.external.trl.data import strict_gsm8k

    assert strict_gsm8k(["2+2=4\n#### 4", "#### 4.", [{"role": "assistant", "content": "#### 1,234"}]],
                        answer=["4", "4", "1234"], trainer_state=None) == [1.0, 0.0, 1.0]


def test_a_stage_generated_on_another_thread_counts_that_threads_cpu():
    """transformers' continuous batching generates on a thread of its own while TRL's waits: the rollout
    stage then counts the process's CPU seconds, so that its work shows in the CPU-seconds table."""
    import threading
    import time

    from rlbench.core.record.stages import Recorder, Stage
    from rlbench.engines.external.trl.timing import StepClock

    events, spent = [], {}

    def work():
        t0 = time.thread_time()
        x = 0
        for i in range(3_000_000):
            x += i * i
        spent["cpu"] = time.thread_time() - t0

    clock = StepClock(Recorder("colocated0", time.monotonic(), sink=events.append), out=None, steps_per_iteration=1)
    with clock.stage(Stage.ROLLOUT):  # the timer's first use imports torch (its profiler range): not measured
        pass
    events.clear()
    for whole in (False, True):
        with clock.stage(Stage.ROLLOUT, whole_process=whole):
            t = threading.Thread(target=work)
            t.start()
            t.join()
    this_thread, process = events[0].cpu, events[1].cpu
    assert this_thread < 0.2 * spent["cpu"] and process >= 0.9 * spent["cpu"]


def test_the_train_dataset_is_built_without_pickling_its_table(monkeypatch):
    """datasets fingerprints a new table by pickling it with dill, which failed with older pyarrow (24 here):
    the rows' own hash is its fingerprint instead, the same for the same rows."""
    pytest.importorskip("datasets")
    import datasets.arrow_dataset
    from rlbench.engines.external.trl.data import train_dataset

    def refuse(*_a, **_k):
        raise AssertionError("the table was pickled to fingerprint it")

    monkeypatch.setattr(datasets.arrow_dataset, "generate_fingerprint", refuse)
    rows = [{"prompt": "1+1=", "answer": "2", "iteration": 0, "index": i} for i in range(3)]
    ds = train_dataset(rows)
    assert ds.to_list() == rows and ds._fingerprint == train_dataset(list(rows))._fingerprint
    assert ds._fingerprint != train_dataset(rows[:2])._fingerprint


def test_names_newer_transformers_use_become_the_older_ones_only_where_missing():
    """A GPU image's transformers 5.17 knows `gradient_checkpointing` and continuous batching's `block_size`
    alone; 5.2x knows both names of each. The translation uses the new ones and is renamed for the classes at
    hand, so no keyword is a TypeError on either."""
    from dataclasses import dataclass

    @dataclass
    class Old:
        gradient_checkpointing: bool = True
        transformers_continuous_batching_config: dict | None = None

    @dataclass
    class New(Old):
        activation_checkpointing: bool = True

    @dataclass
    class OldCache:
        block_size: int = 256

    @dataclass
    class NewCache(OldCache):
        page_size: int = 256

    cfg = load_config(TINY, [])
    kw = settings.grpo_kwargs(cfg, 1, "out", settings.TrlOptions(continuous_batching=True))
    old = settings.named_for(Old, kw, OldCache)
    assert "activation_checkpointing" not in old and old["gradient_checkpointing"] is False
    assert old[settings.CB_CONFIG]["block_size"] == settings.CB_PAGE and "page_size" not in old[settings.CB_CONFIG]
    assert settings.named_for(New, kw, NewCache) == kw
    assert settings.named_for(Old, settings.grpo_kwargs(cfg, 1, "out"), None)["gradient_checkpointing"] is False
