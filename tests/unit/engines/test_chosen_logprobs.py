"""Log-probs of the chosen tokens in slices of positions (engines/trainer/chosen_logprobs.py): the same values
and gradients as the one-shot [tokens x vocabulary] computation within fp32 tolerance, in every sequence
layout and in the tri-model plan, while no LM-head call sees more positions than a slice holds."""
from __future__ import annotations

import pytest
import torch

from rlbench.engines.trainer import chosen_logprobs as chosen
from rlbench.engines.trainer.logprob_plans import SeparatePasses, TriModel
from rlbench.engines.trainer.micro_batch import MicroBatch
from rlbench.engines.trainer.packing import packed_logprobs, packed_logprobs_mask4d, unpacked_logprobs
from rlbench.engines.trainer.packing_dense import packed_logprobs_dense
from test_packing import VOCAB, _group, _model

LAYOUTS = {"unpacked": unpacked_logprobs, "dense": packed_logprobs_dense, "gather": packed_logprobs,
           "mask4d": packed_logprobs_mask4d}
ROWS = 3  # positions per slice in the sliced runs: every group below needs several slices
LOGP_ATOL = 1e-5
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6

pytestmark = pytest.mark.usefixtures("one_thread")


def _sliced(monkeypatch):
    monkeypatch.setattr(chosen, "LOGITS_BUDGET_BYTES", ROWS * 4 * VOCAB)


def _head_rows(model) -> tuple[list[int], object]:
    """Positions each LM-head call sees (a forward hook), and the hook's handle."""
    seen: list[int] = []
    handle = model.lm_head.register_forward_hook(lambda m, i, o: seen.append(o.shape[:-1].numel()))
    return seen, handle


def _run(model, fn, prompt, responses, weights):
    """(log-probs, grads by name) of sum_i <logp_i, w_i>, at temperature 0.8."""
    model.zero_grad(set_to_none=True)
    logps = fn(model, prompt, responses, 0.8)
    sum(torch.dot(lp, w) for lp, w in zip(logps, weights)).backward()
    return [lp.detach() for lp in logps], {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUTS.keys())
def test_sliced_logprobs_and_gradients_equal_the_whole_logits(monkeypatch, layout):
    model = _model("qwen2", "sdpa")
    prompt, responses = _group(3, 7, [5, 9, 2, 6])  # 22 response tokens: 8 slices of 3
    weights = [torch.randn(len(r), generator=torch.Generator().manual_seed(i)) for i, r in enumerate(responses)]
    whole_lp, whole_g = _run(model, LAYOUTS[layout], prompt, responses, weights)
    _sliced(monkeypatch)
    seen, handle = _head_rows(model)
    try:
        sliced_lp, sliced_g = _run(model, LAYOUTS[layout], prompt, responses, weights)
    finally:
        handle.remove()
    assert seen and max(seen) <= ROWS, seen  # never the whole [tokens x vocabulary] at once
    # forward: a slice per ROWS positions (dense: the padded G x R_max); backward: each slice's logits
    # computed again (checkpointing)
    positions = len(responses) * 9 if layout == "dense" else sum(map(len, responses))
    assert len(seen) == 2 * -(-positions // ROWS), seen
    for a, b in zip(whole_lp, sliced_lp):
        torch.testing.assert_close(b, a, atol=LOGP_ATOL, rtol=0)
    for name, a in whole_g.items():
        scale = a.abs().max().clamp_min(1.0).item()
        torch.testing.assert_close(sliced_g[name], a, rtol=GRAD_RTOL, atol=GRAD_ATOL * scale, msg=name)


def test_without_grad_no_slice_is_computed_twice(monkeypatch):
    """The old and reference passes (no grad): one LM-head call per slice, the same values."""
    model = _model("qwen2", "sdpa")
    prompt, responses = _group(4, 5, [4, 7, 3])
    with torch.no_grad():
        whole = unpacked_logprobs(model, prompt, responses)
        _sliced(monkeypatch)
        seen, handle = _head_rows(model)
        sliced = unpacked_logprobs(model, prompt, responses)
        handle.remove()
    assert seen == [3, 3, 3, 3, 2]  # 14 tokens in slices of 3
    for a, b in zip(whole, sliced):
        torch.testing.assert_close(b, a, atol=LOGP_ATOL, rtol=0)


@pytest.mark.parametrize("plan_cls", [TriModel, SeparatePasses])
def test_the_plans_give_the_same_logprobs_sliced(monkeypatch, plan_cls):
    """Tri-model (policy with grad, reference without) and separate passes over the shared-prompt layout."""
    policy, ref = _model("qwen2", "sdpa"), _model("qwen2", "sdpa", seed=1)
    prompt, responses = _group(5, 6, [5, 8, 4])

    MB = MicroBatch(0, prompt, responses, torch.zeros(len(responses)))  # one group's micro-batch
    plan = plan_cls(packed_logprobs_dense, 0.9)
    whole = [[t.detach() for t in part] for part in plan.update_logprobs(policy, ref, MB) if part is not None]
    _sliced(monkeypatch)
    sliced = [[t.detach() for t in part] for part in plan.update_logprobs(policy, ref, MB) if part is not None]
    assert len(sliced) == len(whole) >= 1
    for part_a, part_b in zip(whole, sliced):
        for a, b in zip(part_a, part_b):
            torch.testing.assert_close(b, a, atol=LOGP_ATOL, rtol=0)


def test_logits_that_fit_one_slice_take_the_one_shot_path_bit_for_bit():
    """Under the budget (every default CPU run) the numbers are exactly today's."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, VOCAB, bias=False)
    hidden, targets = torch.randn(10, 16), torch.randint(0, VOCAB, (10,))
    got = chosen.chosen_logprobs(head, hidden, targets, 0.7, VOCAB)
    want = torch.log_softmax(head(hidden).float() / 0.7, -1).gather(-1, targets[:, None]).squeeze(-1)
    assert torch.equal(got, want)
    assert chosen.slice_rows(151_936) == 441 and chosen.slice_rows(VOCAB, budget=1) == 1


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUTS.keys())
@pytest.mark.parametrize("frozen", [False, True], ids=["policy", "frozen"])
def test_the_lm_head_gets_one_matrix_whether_its_weight_requires_grad_or_not(layout, frozen):
    """The reference model's weights are frozen: torch.matmul folds a non-contiguous [G, R, D] input into one
    matrix product only where the weight requires grad, else runs a batched product over copies of the head
    (at the real vocabulary that made the reference's pass 3x the policy's on CPU). Every layout hands the
    head one [N, D] matrix, with the same log-probs as the policy's."""
    model = _model("qwen2", "sdpa")
    prompt, responses = _group(6, 5, [4, 7, 3])
    with torch.no_grad():
        want = LAYOUTS[layout](model, prompt, responses, 1.0)
    model.requires_grad_(not frozen)
    inputs: list[int] = []
    handle = model.lm_head.register_forward_hook(lambda m, i, o: inputs.append(i[0].dim()))
    try:
        with torch.no_grad():
            got = LAYOUTS[layout](model, prompt, responses, 1.0)
    finally:
        handle.remove()
        model.requires_grad_(True)
    assert inputs and set(inputs) == {2}, inputs
    assert all(torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_slices_lower_the_updates_peak_memory(monkeypatch):
    """bf16, a 32k vocabulary, 8 responses of 256: the update's peak (CUDA allocator) falls, the values stay."""
    import transformers

    device = torch.device("cuda", torch.cuda.current_device())
    cfg = transformers.Qwen2Config(vocab_size=32768, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(device, torch.bfloat16).train()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 32768, (32,), generator=g).tolist()
    responses = [torch.randint(0, 32768, (256,), generator=g).tolist() for _ in range(8)]

    def step():
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        lp = unpacked_logprobs(model, prompt, responses)
        torch.stack([x.sum() for x in lp]).sum().backward()
        torch.cuda.synchronize(device)
        return torch.cat([x.detach() for x in lp]), torch.cuda.max_memory_allocated(device) - before

    monkeypatch.setattr(chosen, "LOGITS_BUDGET_BYTES", 2**62)
    whole, whole_peak = step()
    monkeypatch.setattr(chosen, "LOGITS_BUDGET_BYTES", 16 * 2**20)  # 128 positions a slice
    sliced, sliced_peak = step()
    assert sliced_peak < 0.6 * whole_peak, (sliced_peak, whole_peak)  # fp32 logits: 270 MB a copy, whole
    torch.testing.assert_close(sliced, whole, atol=2e-2, rtol=0)
