"""The random initialisation of a named architecture (engines/model/random_init.py): every parameter drawn
once, as the architectures' own `_init_weights` draws it, the same whatever the number of threads."""
import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM, Qwen2Config
from transformers.initialization import no_init_weights

from rlbench.engines.model import random_init


def _model(tie: bool = True):
    cfg = Qwen2Config(vocab_size=3000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie, initializer_range=0.05)
    with no_init_weights():
        return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")


def _state(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_the_same_weights_whatever_the_threads_and_new_ones_for_another_seed(monkeypatch):
    monkeypatch.setattr(random_init, "CHUNK", 10_000)  # the embedding (192,000 values) in 20 chunks
    drawn = []
    for threads, seed in ((1, 0), (3, 0), (2, 1)):
        model = _model()
        random_init.initialise(model, 0.05, seed, threads=threads)
        drawn.append(_state(model))
    assert all(torch.equal(drawn[0][n], drawn[1][n]) for n in drawn[0])
    assert not torch.equal(drawn[0]["model.embed_tokens.weight"], drawn[2]["model.embed_tokens.weight"])


def test_weights_normal_biases_zero_norms_one_and_a_tied_head_drawn_once():
    model = _model(tie=True)
    random_init.initialise(model, 0.05, seed=0)
    model.tie_weights()
    emb = model.model.embed_tokens.weight
    assert model.lm_head.weight is emb and emb.std().item() == pytest.approx(0.05, rel=0.02)
    assert emb.mean().abs().item() < 0.002
    layer = model.model.layers[0]
    assert layer.mlp.up_proj.weight.std().item() == pytest.approx(0.05, rel=0.05)
    assert torch.equal(layer.self_attn.q_proj.bias, torch.zeros_like(layer.self_attn.q_proj.bias))
    assert torch.equal(layer.input_layernorm.weight, torch.ones_like(layer.input_layernorm.weight))
    assert torch.equal(model.model.norm.weight, torch.ones(64))
    # every parameter, and every chunk of one, from its own stream: no two alike
    up = [lay.mlp.up_proj.weight for lay in model.model.layers]
    assert not torch.equal(up[0], up[1]) and not torch.equal(layer.mlp.up_proj.weight.view(-1)[:128],
                                                             layer.mlp.gate_proj.weight.view(-1)[:128])


def test_the_chunks_of_one_matrix_differ(monkeypatch):
    monkeypatch.setattr(random_init, "CHUNK", 1000)
    model = _model()
    random_init.initialise(model, 0.05, seed=0)
    w = model.model.embed_tokens.weight.view(-1)
    chunks = {tuple(w[a:a + 8].tolist()) for a in range(0, 20_000, 1000)}
    assert len(chunks) == 20


def test_a_parameter_of_an_unknown_module_kind_is_refused():
    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.empty(4))

    model = nn.Sequential(nn.Linear(4, 4), Gate())
    with pytest.raises(ValueError, match=r"no random initialisation for 1\.scale \(Gate\)"):
        random_init.initialise(model, 0.02, seed=0)
