"""TRL runs at its fastest fair setting: every setting that changes what an iteration costs (activation
checkpointing, precision and autocast, torch.compile, Liger kernels, padding-free training, continuous
batching, the generation batch) is rlbench's, or one of the differences the run lists
(engines/external/trl/cost_settings.py). Read from what TRL resolved: its trainer's `args` after the
trainer is built and the model it built, not from the keywords passed, so a TRL default that moves shows
here. Fast: one tiny trainer built, nothing trained."""
import pytest

from conftest import TINY
from rlbench.core.config_files import load_config
from rlbench.engines.external.trl import cost_settings, settings

pytest.importorskip("trl")

CONFIGS = {"cpu-default": None, "cpu-tiny": TINY}


def resolved(cfg, tmp_path, options=settings.TrlOptions(), **over) -> tuple[dict, dict]:
    """(TRL's resolved args as JSON, its model's facts) of a GRPOTrainer built from the translation on one
    rank (the tiny model with the character tokenizer), `over` laid over the keywords."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlbench.engines.external.trl.data import strict_gsm8k
    from rlbench.engines.external.trl.export import char_tokenizer
    from rlbench.engines.model.tiny import build_tiny
    from rlbench.engines.model.tokenizer import CharTokenizer

    folder = tmp_path / "policy"
    if not folder.is_dir():
        build_tiny(cfg.model, CharTokenizer().vocab_size, 0).save_pretrained(folder)
        char_tokenizer().save_pretrained(folder)
    kwargs = {**settings.grpo_kwargs(cfg, 1, str(tmp_path / "out"), options, longest_prompt=40), **over}
    kwargs = {k: v for k, v in kwargs.items() if v is not DEFAULT}
    trainer = GRPOTrainer(model=str(folder), reward_funcs=[strict_gsm8k], args=GRPOConfig(**kwargs),
                          train_dataset=Dataset.from_list([{"prompt": "1+1=", "answer": "2"}]),
                          processing_class=char_tokenizer())
    return cost_settings.resolved_args(trainer.args), cost_settings.model_facts(trainer.model)


DEFAULT = object()  # a keyword left out: TRL's own default


def rows(cfg, args, facts, options=settings.TrlOptions()):
    listed = [d["setting"] for d in settings.differences(cfg, options)]
    return cost_settings.compare(args, facts, cfg, listed)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("cb", [False, True])
def test_every_cost_setting_is_equal_or_listed(name, cb, tmp_path, one_thread):
    cfg = load_config(CONFIGS[name], [])
    options = settings.TrlOptions(continuous_batching=cb)
    args, facts = resolved(cfg, tmp_path, options)
    table = rows(cfg, args, facts, options)
    assert [r["setting"] for r in table] == [s.name for s in cost_settings.COST_SETTINGS]
    assert cost_settings.unlisted(table) == []
    by = {r["setting"]: r for r in table}
    assert by["activation (gradient) checkpointing"]["trl"] is False and not facts["checkpointing"]
    assert by["precision"]["trl"] == f"{cfg.model.dtype}, no autocast"
    assert by["generation batch size (samples)"]["trl"] == cfg.batch_size
    assert by["continuous batching"]["equal"] is cb  # rlbench's sampler always batches continuously
    assert len(args) > 150 and args["use_transformers_continuous_batching"] is cb  # every field, as JSON


@pytest.mark.parametrize("keyword, setting", [
    ("activation_checkpointing", "activation (gradient) checkpointing"),  # GRPOConfig's default: on
    ("bf16", "precision"),  # GRPOConfig's default: bf16 autocast
])
def test_a_cost_setting_left_at_trl_default_is_caught(keyword, setting, tmp_path, one_thread):
    """The translation's value is needed: left to TRL's default, the setting differs and nothing lists it."""
    cfg = load_config(TINY, [])
    args, facts = resolved(cfg, tmp_path, **{keyword: DEFAULT})
    found = cost_settings.unlisted(rows(cfg, args, facts))
    assert [u.split(":")[0] for u in found] == [setting]


@pytest.mark.parametrize("over, setting", [
    ({"torch_compile": True}, "torch.compile"),
    ({"use_liger_kernel": True}, "Liger / hub kernels"),
    ({"model_init_kwargs": {"use_kernels": True}}, "Liger / hub kernels"),
    ({"padding_free": True}, "padding-free training"),
    ({"generation_batch_size": 32}, "generation batch size (samples)"),
])
def test_each_other_cost_setting_is_checked(over, setting):
    """Read from the resolved arguments (a dict here: turning these on would need Triton or compile)."""
    cfg = load_config(TINY, [])
    args = {"activation_checkpointing": False, "bf16": False, "generation_batch_size": cfg.batch_size,
            "use_transformers_continuous_batching": False, **over}
    found = cost_settings.unlisted(rows(cfg, args, {"dtype": cfg.model.dtype, "checkpointing": False}))
    assert [u.split(":")[0] for u in found] == [setting]


def test_continuous_batching_unlisted_is_caught():
    """TRL's generation differs from rlbench's only as the `sampling` difference says; without it, caught."""
    cfg = load_config(TINY, [])
    args = {"generation_batch_size": cfg.batch_size, "use_transformers_continuous_batching": False}
    table = cost_settings.compare(args, {"dtype": cfg.model.dtype}, cfg, listed=[])
    assert [u.split(":")[0] for u in cost_settings.unlisted(table)] == ["continuous batching"]


def test_continuous_batching_cache_is_sized_for_a_rank():
    """Not half the machine's memory (transformers' default on CPU): the rank's sequences, each its pages."""
    cfg = load_config(None, [])
    kw = settings.grpo_kwargs(cfg, 2, "out", settings.TrlOptions(continuous_batching=True), longest_prompt=300)
    cb = kw["transformers_continuous_batching_config"]
    per_rank = cfg.batch_size // 2
    assert cb["num_blocks"] == per_rank * 2  # 300 + 96 tokens: two pages of 256
    assert cb["max_requests_per_batch"] == min(cfg.rollout.max_num_seqs, per_rank)
    assert settings.grpo_kwargs(cfg, 2, "out")["use_transformers_continuous_batching"] is False
