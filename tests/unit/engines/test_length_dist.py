"""rollout.response_length: lengths drawn per sample (EOS ignored) for throughput runs of random-init models."""
import math
import statistics

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlbench.core.config_files import load_config
from rlbench.engines.rollout.base import PromptRequest, SamplingParams
from rlbench.engines.rollout.sampler import BuiltinSampler
from rlbench.engines.rollout.sampling import LengthSampling, target_length

from conftest import TINY

V, EOS = 64, 5  # a small vocabulary: a random model samples EOS often, and must not stop on it


pytestmark = pytest.mark.usefixtures("one_thread")


def sampler(max_num_seqs: int = 4) -> BuiltinSampler:
    cfg = Qwen2Config(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, max_position_embeddings=512)
    torch.manual_seed(0)
    return BuiltinSampler(Qwen2ForCausalLM(cfg).eval(), EOS, max_num_seqs=max_num_seqs)


def requests(k: int) -> list[PromptRequest]:
    return [PromptRequest(i, [1 + (i + t) % (V - 1) for t in range(3 + i % 4)]) for i in range(k)]


def lengths(groups) -> dict:
    return {(g.prompt_index, j): len(r) for g in groups for j, r in enumerate(g.responses)}


def test_fixed_gives_exact_lengths_and_ignores_eos():
    sp = LengthSampling(n=3, max_new_tokens=40, response_length="fixed", response_length_mean=17)
    groups = sampler().generate(requests(5), sp)
    assert set(lengths(groups).values()) == {17}
    assert all(not f for g in groups for f in g.finished)  # none ended by EOS
    assert any(EOS in r[:-1] for g in groups for r in g.responses)  # EOS was sampled and did not stop it


def test_eos_mode_is_the_plain_sampler():
    reqs = requests(4)
    plain = sampler().generate(reqs, SamplingParams(n=2, max_new_tokens=30, seed=3))
    eos = sampler().generate(reqs, LengthSampling(n=2, max_new_tokens=30, seed=3, response_length="eos"))
    key = lambda gs: sorted((g.prompt_index, g.responses) for g in gs)  # noqa: E731
    assert key(plain) == key(eos)


def test_lognormal_deterministic_per_seed_and_batch_invariant():
    sp = LengthSampling(n=4, max_new_tokens=64, seed=11, iteration=2, response_length="lognormal",
                        response_length_mean=20, response_length_sigma=0.8)
    reqs = requests(6)
    a = sampler(max_num_seqs=3).generate(reqs, sp)
    b = sampler(max_num_seqs=16).generate(list(reversed(reqs)), sp)  # other batch, other order
    c = sampler(max_num_seqs=5).generate(reqs[2:4], sp)  # a subset
    la, lb, lc = lengths(a), lengths(b), lengths(c)
    assert la == lb and all(la[k] == v for k, v in lc.items())
    assert la == {(i, j): target_length(sp, i, j) for i in range(6) for j in range(4)}
    toks = {(g.prompt_index, j): r for g in a for j, r in enumerate(g.responses)}
    assert all(toks[k] == r for g in b for k, r in (((g.prompt_index, j), r) for j, r in enumerate(g.responses)))
    other = LengthSampling(**{**sp.__dict__, "seed": 12})
    assert [target_length(other, i, 0) for i in range(20)] != [target_length(sp, i, 0) for i in range(20)]


def test_lognormal_mean_and_long_tail():
    sp = LengthSampling(n=1, max_new_tokens=100_000, response_length="lognormal", response_length_mean=200,
                        response_length_sigma=1.0)
    xs = [target_length(sp, i, j) for i in range(500) for j in range(8)]  # 4000 samples
    mean = statistics.fmean(xs)
    assert abs(mean - 200) < 0.1 * 200  # the requested mean (the standard error is ~4%)
    q50, q99 = statistics.quantiles(xs, n=100)[49], statistics.quantiles(xs, n=100)[98]
    assert q50 < 0.7 * mean  # median exp(mu) = 200 / e^0.5 ~ 121
    assert q99 > 4 * q50 and max(xs) > 8 * q50  # a long tail


def test_lengths_clipped_to_max_new_tokens():
    sp = LengthSampling(n=1, max_new_tokens=50, response_length="lognormal", response_length_mean=45,
                        response_length_sigma=1.5)
    xs = [target_length(sp, i, 0) for i in range(2000)]
    assert min(xs) >= 1 and max(xs) == 50
    assert target_length(LengthSampling(n=1, max_new_tokens=8, response_length="fixed", response_length_mean=0.2), 0, 0) == 1
    assert target_length(LengthSampling(n=1, max_new_tokens=8, response_length="fixed", response_length_mean=80), 0, 0) == 8


def test_sigma_zero_is_the_mean():
    sp = LengthSampling(n=1, max_new_tokens=500, response_length="lognormal", response_length_mean=37,
                        response_length_sigma=0.0)
    assert {target_length(sp, i, j) for i in range(10) for j in range(3)} == {37}
    assert math.isclose(LengthSampling(n=1, max_new_tokens=1).response_length_sigma, load_config(TINY).rollout.response_length_sigma)


def test_config_reaches_the_iteration_sampling():
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import iteration_input
    from rlbench.engines.model.tokenizer import CharTokenizer

    cfg = load_config(TINY, ["rollout.response_length=lognormal", "rollout.response_length_mean=12",
                             "rollout.response_length_sigma=0.5"])
    sp = iteration_input(cfg, load_dataset(cfg.data, cfg.run.seed), CharTokenizer(), 3).sampling
    assert (sp.response_length, sp.response_length_mean, sp.response_length_sigma, sp.iteration) == \
        ("lognormal", 12, 0.5, 3)


# ---------------------------------------------------------------- model.kind=hf_config (random init, real shapes)

@pytest.mark.parametrize("name, billions", [("qwen2.5-0.5b", 0.494), ("qwen2.5-7b", 7.616)])
def test_shipped_architecture_configs(name, billions):
    """The hand-written Qwen2.5 configs have the published parameter counts (built on the meta device)."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    from rlbench.engines.model.loader import config_file

    values = {k: v for k, v in json.loads(config_file(name).read_text()).items() if not k.startswith("_")}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(values.pop("model_type"), **values))
    assert abs(sum(p.numel() for p in model.parameters()) / 1e9 - billions) < 0.001


def test_hf_config_random_init_runs_a_sync_iteration(tmp_path):
    """hf_config + char tokenizer widened to the model's vocabulary + lognormal lengths, end to end."""
    import json

    from rlbench.core.devices import device as dev
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import iteration_input, build_schedule
    from rlbench.engines.model.loader import VocabCharTokenizer, load_policy
    from rlbench.core.record.stages import now

    arch = {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 512, "tie_word_embeddings": True, "_note": "ignored"}
    (tmp_path / "arch.json").write_text(json.dumps(arch))
    cfg = load_config(TINY, ["model.kind=hf_config", f"model.path={tmp_path / 'arch.json'}",
                             "rollout.response_length=lognormal", "rollout.response_length_mean=10",
                             "rollout.response_length_sigma=0.7", "rollout.max_new_tokens=30"])
    ds = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, info = load_policy(cfg, ds)
    assert isinstance(tok, VocabCharTokenizer) and tok.vocab_size == 1000 and info["random_init"]
    assert tok.decode([tok.encode("7")[0], 999, 500]) == "7"  # ids past the characters decode to ''
    schedule, _ = build_schedule(cfg, policy, tok, now(), sink=None, device=dev.resolve("cpu"))
    inp = iteration_input(cfg, ds, tok, 0)
    out = schedule.run_iteration(inp)
    got = {(g.prompt_index, j): len(r) for g in out.groups for j, r in enumerate(g.responses)}
    assert got == {(i, j): target_length(inp.sampling, i, j) for i in range(len(inp.requests))
                   for j in range(cfg.rollout.group_size)}
    schedule.close()
