"""Limits checked before any work starts: positions and memory, exit 2 naming the keys and the limit."""
import pytest

from conftest import TINY
from support.cli import rlbench

from rlbench.core.config_files import load_config
from rlbench.core.devices import limits
from rlbench.core.errors import UserError

# A 0.5B-like model in bfloat16 (Qwen2.5-0.5B's shape): 494M parameters, 24 layers, 2 KV heads of 64.
HALF_B = limits.ModelFacts(positions=32768, params=494_000_000, layers=24, kv_heads=2, head_dim=64,
                           vocab=151_936, dtype_bytes=2)
GIB = 1 << 30


def cfg(*sets):
    return load_config(TINY, list(sets))


def test_prompt_plus_max_new_tokens_must_fit_the_positions():
    small = limits.ModelFacts(positions=2048, params=1, layers=1, kv_heads=1, head_dim=1, vocab=1, dtype_bytes=4)
    limits.check_positions(cfg("rollout.max_new_tokens=1948"), small, prompt_max=100)  # 2048: fits exactly
    with pytest.raises(UserError, match=r"100 tokens.*max_new_tokens=1949.*= 2049 tokens exceed the model's 2048 "
                                        r"positions.*at most 1948"):
        limits.check_positions(cfg("rollout.max_new_tokens=1949"), small, prompt_max=100)


def test_drawn_lengths_are_named_when_they_set_the_cap():
    small = limits.ModelFacts(positions=2048, params=1, layers=1, kv_heads=1, head_dim=1, vocab=1, dtype_bytes=4)
    with pytest.raises(UserError, match="response_length=lognormal: drawn lengths are clipped to it"):
        limits.check_positions(cfg("rollout.max_new_tokens=2100", "rollout.response_length=lognormal"), small, 50)


def test_vllm_max_model_len_is_checked_against_prompt_and_positions():
    c = cfg("rollout.backend=vllm", "rollout.max_model_len=512", "rollout.max_new_tokens=480")
    with pytest.raises(UserError, match=r"exceed rollout.max_model_len=512.*at most 412"):
        limits.check_positions(c, HALF_B, prompt_max=100)
    with pytest.raises(UserError, match=r"rollout.max_model_len=40000 exceeds the model's 32768 positions"):
        limits.check_positions(cfg("rollout.backend=vllm", "rollout.max_model_len=40000"), HALF_B, 100)


def test_memory_estimate_counts_states_kv_and_logits():
    c = cfg("rollout.max_new_tokens=384", "rollout.max_num_seqs=64", "train.micro_batch_size=4",
            "model.dtype=bfloat16")
    train, rollout = limits.replica_bytes(c, HALF_B, prompt_max=128)
    weights = 494e6 * 2
    # the log-probs go through in slices of 256 MiB of fp32 logits: 441 positions at this vocabulary,
    # fewer than the micro-batch's 4 x 384
    assert train == pytest.approx(5 * weights + 441 * 151_936 * (2 + 4))
    assert rollout == pytest.approx(weights + 64 * 512 * 2 * 24 * 2 * 64 * 2 + 64 * 151_936 * 4)


def test_logits_are_a_micro_batch_or_one_slice_whichever_is_smaller():
    from rlbench.engines.trainer.chosen_logprobs import LOGITS_BUDGET_BYTES, slice_rows

    assert limits.LOGITS_SLICE_BYTES == LOGITS_BUDGET_BYTES
    small = cfg("rollout.max_new_tokens=64", "train.micro_batch_size=2")
    assert limits.logits_bytes(small, HALF_B, 128) == 2 * 64 * 151_936 * (2 + 4)  # fits one slice
    budget = cfg("rollout.max_new_tokens=384", "train.micro_batch_tokens=4096")
    assert limits.logits_bytes(budget, HALF_B, 128) == slice_rows(151_936) * 151_936 * (2 + 4)
    tiny_vocab = limits.ModelFacts(positions=4096, params=1_000_000, layers=2, kv_heads=1, head_dim=8, vocab=100,
                                   dtype_bytes=4)
    # a token budget: its positions less a prompt's, when no slice cuts them
    assert limits.logits_bytes(budget, tiny_vocab, 128) == (4096 - 128) * 100 * (4 + 4)


def test_memory_refused_only_when_it_cannot_fit():
    c = cfg("engine.device=cuda", "model.dtype=bfloat16")
    limits.check_memory(c, HALF_B, 128, "cuda", 80 * GIB)  # a 0.5B model fits an 80 GB GPU
    with pytest.raises(UserError, match=r"needs at least .* GiB but the memory of one cuda device is 4.0 GiB.*"
                                        r"train.micro_batch_size=2, rollout.max_num_seqs=8"):
        limits.check_memory(c, HALF_B, 128, "cuda", 4 * GIB)
    with pytest.raises(UserError, match="available memory is 1.0 GiB"):  # CPU: every process of the run adds up
        limits.check_memory(cfg(), HALF_B, 128, "cpu", 1 * GIB)


def test_the_1_5b_gpu_config_fits_an_80_gb_gpu_and_not_a_16_gb_one():
    """configs/qwen2.5-1.5b-shape-gpu.yaml (the prepared GPU command's ablation-1.5b step), checked as
    `rlbench run` checks it before the first cell: its longest prompt and 3,072 new tokens fit the positions
    and the token budget, and the memory estimate an H100; a smaller GPU is refused naming the budget key."""
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.model.loader import model_facts

    c = load_config("qwen2.5-1.5b-shape-gpu")
    data = load_dataset(c.data, c.run.seed)
    facts, tok = model_facts(c)
    longest = max(len(tok.prompt_ids(data.prompt_text(p))) for p in data.train + data.eval + data.seen)
    assert 300 <= longest <= 1000  # prompts of a few hundred tokens
    limits.check(c, facts, longest, "cuda", 80 * GIB)
    with pytest.raises(UserError, match=r"needs at least 2\d\.\d GiB but the memory of one cuda device is 16.0 "
                                        r"GiB.*train.micro_batch_tokens=8192"):
        limits.check(c, facts, longest, "cuda", 16 * GIB)


@pytest.mark.e2e
def test_cli_refuses_past_the_positions_before_any_work(tmp_path):
    """The issue's case: --set rollout.max_new_tokens=5000 on the tiny model (2048 positions). The check
    needs the tokenizer and the model's config; it runs in a process forked from the run's fork server, so
    `rlbench run`'s own process imports neither torch nor transformers (the server imports them once)."""
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   "--set", "rollout.max_new_tokens=5000", timeout=120, prelude=IMPORTED_AT_EXIT, fresh=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "rollout.max_new_tokens=5000" in proc.stderr and "2048 positions" in proc.stderr
    assert not list(tmp_path.iterdir())  # no run folder: nothing started
    assert "imported at exit: []" in proc.stderr, proc.stderr[-2000:]


# Python run first in `rlbench run`'s interpreter: which of torch and transformers it has imported when it ends.
IMPORTED_AT_EXIT = ("import atexit, os; pid = os.getpid(); atexit.register(lambda: os.getpid() == pid and "
                    "print('imported at exit:', [m for m in ('torch', 'transformers') if m in sys.modules], "
                    "file=sys.stderr))")


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_parameters_counted_from_the_config_equal_the_built_model(arch, tied, bias):
    """The count `rlbench run` checks memory with (no modelling code imported) == the model transformers
    builds, for both architectures, tied and untied heads, grouped-query attention, and Llama's biases."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlbench.engines.model.shape import param_count

    extra = {"attention_bias": bias, "mlp_bias": bias} if arch == "llama" else {}
    c = AutoConfig.for_model(arch, vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                             num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=tied, **extra)
    with torch.device("meta"):
        built = sum(p.numel() for p in AutoModelForCausalLM.from_config(c).parameters())
    assert param_count(c) == built


def test_parameters_of_the_shipped_model_shapes():
    """Qwen2.5-0.5B, 1.5B and 7B from configs/models/ (0.494 B, 1.54 B and 7.616 B, docs/platforms/gpu.md) and
    the tiny model."""
    from rlbench.core.config_files import load_config
    from rlbench.engines.model.loader import model_config_and_tokenizer
    from rlbench.engines.model.shape import param_count

    counts = {}
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"):
        cfg = load_config(None, ["model.kind=hf_config", f"model.path=models/{name}.json"])
        counts[name] = param_count(model_config_and_tokenizer(cfg)[0])
    assert counts == {"qwen2.5-0.5b": 494_032_768, "qwen2.5-1.5b": 1_543_714_304, "qwen2.5-7b": 7_615_616_512}
    assert param_count(model_config_and_tokenizer(load_config(None, []))[0]) > 0
