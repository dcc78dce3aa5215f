"""TRL runs at its fastest fair setting, and the check refuses by default: every resolved GRPOConfig field is
diffed against a GRPOConfig built from rlbench's translation alone, and fails on a difference that
cost_settings.ALLOWED does not name; the settings that would move in both (TRL's defaults: activation
checkpointing, precision and autocast, torch.compile, Liger kernels, attention kernel, continuous batching,
the generation batch) are compared with rlbench's engines, or listed as differences
(engines/external/trl/cost_settings.py). Read from what TRL resolved: its trainer's `args` after the
trainer is built and the model it built, not from the keywords passed. Fast: tiny trainers built, nothing
trained."""
import pytest
import transformers

from conftest import TINY
from rlbench.core.config_files import load_config
from rlbench.engines.external.trl import cost_settings, settings

pytest.importorskip("trl")

CONFIGS = {"cpu-default": None, "cpu-tiny": TINY}


def resolved(cfg, tmp_path, options=settings.TrlOptions(), **over) -> tuple[dict, dict, dict]:
    """(TRL's resolved args as JSON, its model's facts, the reference: the translation's own GRPOConfig) of a
    GRPOTrainer built from the translation on one rank (the tiny model with the character tokenizer), `over`
    laid over the keywords."""
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
    translation = settings.named_for(GRPOConfig, settings.grpo_kwargs(cfg, 1, str(tmp_path / "out"), options,
                                                                      longest_prompt=40),
                                     getattr(transformers, "ContinuousBatchingConfig", None))
    over = settings.named_for(GRPOConfig, over)  # under the names this transformers has
    kwargs = {k: v for k, v in {**translation, **over}.items() if v is not DEFAULT}
    trainer = GRPOTrainer(model=str(folder), reward_funcs=[strict_gsm8k], args=GRPOConfig(**kwargs),
                          train_dataset=Dataset.from_list([{"prompt": "1+1=", "answer": "2"}]),
                          processing_class=char_tokenizer())
    return (cost_settings.resolved_args(trainer.args), cost_settings.model_facts(trainer.model),
            cost_settings.reference_args(GRPOConfig, translation))


DEFAULT = object()  # a keyword left out: TRL's own default


def rows(cfg, args, facts, reference, options=settings.TrlOptions()):
    listed = [d["setting"] for d in settings.differences(cfg, options)]
    return cost_settings.compare(args, facts, cfg, listed, reference)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("cb", [False, True])
def test_every_cost_setting_is_equal_or_listed(name, cb, tmp_path, one_thread):
    cfg = load_config(CONFIGS[name], [])
    options = settings.TrlOptions(continuous_batching=cb)
    args, facts, reference = resolved(cfg, tmp_path, options)
    table = rows(cfg, args, facts, reference, options)
    assert [r["setting"] for r in table] == [s.name for s in cost_settings.COST_SETTINGS]  # no field differs
    assert cost_settings.unlisted(table) == []
    by = {r["setting"]: r for r in table}
    assert by["activation (gradient) checkpointing"]["trl"] is False and not facts["checkpointing"]
    assert by["precision"]["trl"] == f"{cfg.model.dtype}, no autocast"
    assert by["generation batch size (samples)"]["trl"] == cfg.batch_size
    assert by["continuous batching"]["equal"] is cb  # rlbench's sampler always batches continuously
    assert by["attention kernel"]["trl"] == "sdpa"
    assert len(args) > 150 and args["use_transformers_continuous_batching"] is cb  # every field, as JSON


@pytest.mark.parametrize("keyword, setting", [
    ("activation_checkpointing", "activation (gradient) checkpointing"),  # GRPOConfig's default: on
    ("bf16", "precision"),  # GRPOConfig's default: bf16 autocast
])
def test_a_cost_setting_left_at_trl_default_is_caught(keyword, setting, tmp_path, one_thread):
    """The translation's value is needed: left to TRL's default, the setting differs and nothing lists it."""
    from trl import GRPOConfig

    cfg = load_config(TINY, [])
    args, facts, reference = resolved(cfg, tmp_path, **{keyword: DEFAULT})
    found = [u.split(":")[0] for u in cost_settings.unlisted(rows(cfg, args, facts, reference))]
    (field,) = settings.named_for(GRPOConfig, {keyword: None})  # the older name where transformers has it (5.17)
    assert found[0] == setting and f"GRPOConfig.{field}" in found  # the row and the field


def test_the_four_unlisted_differences_each_fail(tmp_path, one_thread):
    """Eager attention, an fp32 LM head, a micro-batch of 1 (the same samples per step) and generation
    without its KV cache: each a cost rlbench's run does not pay or pays differently, each refused by the
    field diff."""
    cfg = load_config(TINY, [])
    kw = settings.grpo_kwargs(cfg, 1, "out", longest_prompt=40)
    per_sample = {"per_device_train_batch_size": 1,
                  "gradient_accumulation_steps": kw["gradient_accumulation_steps"] * kw["per_device_train_batch_size"],
                  "steps_per_generation": kw["steps_per_generation"] * kw["per_device_train_batch_size"]}
    cases = {"model_init_kwargs": {"model_init_kwargs": {**kw["model_init_kwargs"], "attn_implementation": "eager"}},
             "cast_lm_head_to_fp32": {"cast_lm_head_to_fp32": True},
             "per_device_train_batch_size": per_sample,
             "generation_kwargs": {"generation_kwargs": {"use_cache": False}}}
    for field, over in cases.items():
        args, facts, reference = resolved(cfg, tmp_path, **over)
        found = [u.split(":")[0] for u in cost_settings.unlisted(rows(cfg, args, facts, reference))]
        assert f"GRPOConfig.{field}" in found, (field, found)
    assert facts["attn_implementation"] == "sdpa"  # the last trainer; eager's is caught by its row too
    args, facts, reference = resolved(cfg, tmp_path, **cases["model_init_kwargs"])
    found = [u.split(":")[0] for u in cost_settings.unlisted(rows(cfg, args, facts, reference))]
    assert found == ["attention kernel", "GRPOConfig.model_init_kwargs"]


def test_an_allowed_field_passes_with_its_reason_and_no_reference_fails():
    cfg = load_config(TINY, [])
    args = {"activation_checkpointing": False, "bf16": False, "generation_batch_size": cfg.batch_size,
            "use_transformers_continuous_batching": False, "output_dir": "/elsewhere"}
    facts = {"dtype": cfg.model.dtype, "checkpointing": False, "attn_implementation": "sdpa"}
    table = rows(cfg, args, facts, {**args, "output_dir": "out"})
    (moved,) = [r for r in table if r["setting"] == "GRPOConfig.output_dir"]
    assert moved["listed_as"] == f"allowed: {cost_settings.ALLOWED['output_dir']}"
    assert cost_settings.unlisted(table) == []
    assert [u.split(":")[0] for u in cost_settings.unlisted(rows(cfg, args, facts, None))] == ["GRPOConfig fields"]


@pytest.mark.parametrize("over, setting", [
    ({"torch_compile": True}, "torch.compile"),
    ({"use_liger_kernel": True}, "Liger / hub kernels"),
    ({"model_init_kwargs": {"use_kernels": True}}, "Liger / hub kernels"),
    ({"generation_batch_size": 32}, "generation batch size (samples)"),
])
def test_each_other_cost_setting_is_checked(over, setting):
    """Read from the resolved arguments (a dict here: turning these on would need Triton or compile)."""
    cfg = load_config(TINY, [])
    args = {"activation_checkpointing": False, "bf16": False, "generation_batch_size": cfg.batch_size,
            "use_transformers_continuous_batching": False, **over}
    facts = {"dtype": cfg.model.dtype, "checkpointing": False, "attn_implementation": "sdpa"}
    found = cost_settings.unlisted(rows(cfg, args, facts, reference=args))  # the reference moved alike
    assert [u.split(":")[0] for u in found] == [setting]


def test_continuous_batching_unlisted_is_caught():
    """TRL's generation differs from rlbench's only as the `sampling` difference says; without it, caught."""
    cfg = load_config(TINY, [])
    args = {"generation_batch_size": cfg.batch_size, "use_transformers_continuous_batching": False}
    facts = {"dtype": cfg.model.dtype, "attn_implementation": "sdpa"}
    table = cost_settings.compare(args, facts, cfg, listed=[], reference=args)
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
