"""Micro-batches by token budget (train.micro_batch_tokens): responses of several groups packed into one
stream without padding give the same loss and gradients as one group per micro-batch (fp32, CPU)."""
from __future__ import annotations

import queue

import pytest
import torch
from conftest import fixed_reward_trainer

from rlbench.core.config_files import load_config
from rlbench.core.errors import UserError
from rlbench.core.record.stages import Recorder
from rlbench.engines.model.tiny import build_tiny
from rlbench.engines.model.tokenizer import CharTokenizer
from rlbench.engines.rollout.base import Group
from rlbench.engines.schedules.common import GroupReceiver
from rlbench.engines.trainer.micro_batch import MicroBatch, TokenBatch, pack_by_tokens
from rlbench.engines.trainer.packing import unpacked_logprobs
from rlbench.engines.trainer.packing_varlen import Document, allowed, stream, varlen_logprobs

_FixedReward = fixed_reward_trainer()
LENGTHS = [(3, 9, 5, 12), (7, 1, 10, 4), (2, 6, 11, 8)]  # mixed lengths, three groups


def _groups() -> list[Group]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i, lengths in enumerate(LENGTHS):
        prompt = torch.randint(3, 90, (6 + 2 * i,), generator=g).tolist()
        responses = [torch.randint(3, 90, (n,), generator=g).tolist() for n in lengths]
        out.append(Group(i, prompt, responses, [[0.0] * len(r) for r in responses], version=0))
    return out


def _update(sets: list[str]):
    """One iteration's update through Trainer.train over the three groups (SGD, lr 1: the update is the
    clipped gradient itself) -> (parameters after it, step stats, the micro-batches trained)."""
    cfg = load_config(None, ["rollout.group_size=4", "train.micro_batch_size=4", *sets])
    tok = CharTokenizer()
    model = build_tiny(cfg.model, tok.vocab_size, seed=0)
    tr = _FixedReward(model, cfg, tok)
    tr.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    seen, batches = [], tr.batches

    def recording(groups, advantages):
        seen.extend(batches(groups, advantages))
        return seen
    tr.batches = recording
    tr.begin()
    tr.train(Recorder("t", 0.0), 0, _groups(), {i: "0" for i in range(len(LENGTHS))})
    stats = tr.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}, stats, seen


@pytest.mark.parametrize("layout", [[], ["engine.shared_prompt=true"], ["engine.tri_model=true"]])
@pytest.mark.parametrize("budget", [40, 1000])
def test_packed_by_budget_equals_one_group_per_micro_batch(layout, budget):
    ref, ref_stats, ref_mbs = _update(layout)
    got, stats, mbs = _update(layout + [f"train.micro_batch_tokens={budget}"])
    assert all(isinstance(mb, MicroBatch) for mb in ref_mbs) and len(ref_mbs) == 3
    assert all(isinstance(mb, TokenBatch) and mb.tokens() <= budget for mb in mbs)
    assert len(mbs) == 1 if budget == 1000 else len(mbs) >= 3  # the whole batch in one stream, or several
    if budget == 1000 or not layout:  # some stream holds responses of two groups
        assert any(len({p.prompt_index for p in mb.parts()}) > 1 for mb in mbs)
    assert stats["tokens"] == ref_stats["tokens"] == sum(map(sum, LENGTHS))
    assert stats["loss"] == pytest.approx(ref_stats["loss"], rel=1e-5, abs=1e-7)
    assert stats["kl"] == pytest.approx(ref_stats["kl"], rel=1e-4, abs=1e-9)
    assert stats["grad_norm"] == pytest.approx(ref_stats["grad_norm"], rel=1e-5)
    for n in ref:
        torch.testing.assert_close(got[n], ref[n], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shared", [False, True])
def test_varlen_logprobs_equal_the_unpacked_rows(shared):
    cfg = load_config(None, [])
    model = build_tiny(cfg.model, CharTokenizer().vocab_size, seed=0).double()
    docs = []
    for g in _groups():
        docs += [Document(g.prompt_ids, g.responses)] if shared else \
            [Document(g.prompt_ids, [r]) for r in g.responses]
    got = varlen_logprobs(model, docs)
    want = [lp for g in _groups() for lp in unpacked_logprobs(model, g.prompt_ids, g.responses)]
    assert [x.shape for x in got] == [x.shape for x in want]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_stream_restarts_positions_and_keeps_attention_inside_each_sequence():
    docs = [Document([5, 6], [[7, 8]]), Document([9], [[10], [11, 12]])]
    s = stream(docs)
    assert s["input_ids"].tolist() == [5, 6, 7, 8, 9, 10, 11, 12]
    assert s["position_ids"].tolist() == [0, 1, 2, 3, 0, 1, 1, 2]  # shared prompt: every response at P
    assert s["pred"].tolist() == [1, 2, 4, 4, 6]  # first tokens from their prompt's last position
    q = torch.arange(8)
    seen = allowed(s["doc"], s["seg"], q[:, None], q[None, :]).int().tolist()  # the rule FlexAttention uses
    assert seen[3] == [1, 1, 1, 1, 0, 0, 0, 0]  # doc 0's last token: its own document only
    assert seen[7] == [0, 0, 0, 0, 1, 0, 1, 1]  # the 2nd response of doc 1: its prompt and itself
    assert seen[4] == [0, 0, 0, 0, 1, 0, 0, 0]


def _mb(i, P, lengths):
    return MicroBatch(i, list(range(1, P + 1)), [[3] * n for n in lengths], torch.arange(len(lengths)).float())


@pytest.mark.parametrize("shared", [False, True])
def test_pack_keeps_order_fills_to_the_budget_and_splits_groups(shared):
    groups = [_mb(0, 4, [3, 5, 2]), _mb(1, 3, [6, 1]), _mb(2, 5, [4])]
    batches = pack_by_tokens(groups, 14, lambda mb: shared)
    assert all(b.tokens() <= 14 for b in batches)
    assert [len(r) for b in batches for r in b.responses] == [3, 5, 2, 6, 1, 4]
    assert torch.equal(torch.cat([b.advantages for b in batches]), torch.tensor([0., 1., 2., 0., 1., 0.]))
    # shared: group 0 fills 4+3+5+2 = 14; unshared: every response carries its prompt, and group 1's last
    # response shares a batch with its first one's predecessor... (a group continues into the next batch)
    assert [b.tokens() for b in batches] == ([14, 10, 9] if shared else [7, 9, 6, 13, 9])
    assert [[p.prompt_index for p in b.parts()] for b in batches] == \
        ([[0], [1], [2]] if shared else [[0], [0], [0], [1], [2]])


def test_a_budget_smaller_than_a_sequence_is_refused_with_both_numbers():
    with pytest.raises(UserError, match=r"micro_batch_tokens=8 .* 9 tokens"):
        pack_by_tokens([_mb(0, 4, [3, 5])], 8, lambda mb: False)


def test_config_time_check_names_the_budget_and_the_longest_sequence():
    from rlbench.core.devices.limits import ModelFacts, check_positions

    cfg = load_config(None, ["train.micro_batch_tokens=50", "rollout.max_new_tokens=40"])
    facts = ModelFacts(positions=4096, params=1, layers=1, kv_heads=1, head_dim=8, vocab=10, dtype_bytes=4)
    with pytest.raises(UserError, match=r"train.micro_batch_tokens=50 .*= 70 tokens.*at least 70"):
        check_positions(cfg, facts, prompt_max=30)
    check_positions(load_config(None, ["train.micro_batch_tokens=70", "rollout.max_new_tokens=40"]), facts, 30)


def test_arrived_groups_are_taken_together_up_to_the_budget():
    """periodic-async: the groups already on the queue go to the trainer in one call, until the budget."""
    arrived = queue.Queue()
    receiver = GroupReceiver(Recorder("d", 0.0), False, timeout_s=5)

    class Sealed:
        elsewhere, arrived_at = False, None  # SealedGroup's: sealed on the driver's node

        def __init__(self, i):
            self.prompt_index = i

        def open(self):
            return Group(self.prompt_index, [1] * 10, [[2] * 10], [[0.0] * 10])

    for i in range(5):
        arrived.put(Sealed(i))
    batches = [[g.prompt_index for g in b] for b in receiver.arrived_batches(0, arrived, 5, budget=40)]
    assert batches == [[0, 1], [2, 3], [4]]  # 20 tokens each; the last: nothing more had arrived
    for i in range(2):
        arrived.put(Sealed(i))
    assert [len(b) for b in receiver.arrived_batches(0, arrived, 2, budget=None)] == [1, 1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_varlen_on_cuda_equals_the_unpacked_rows(dtype):
    """FlexAttention with the document mask (compiled, with its backward), tests/unit/engines/test_cuda.py's tolerances."""
    lp_tol, g_tol = {torch.float32: (1e-4, 1e-3), torch.bfloat16: (0.25, 0.05)}[dtype]
    cfg = load_config(None, [])
    model = build_tiny(cfg.model, CharTokenizer().vocab_size, seed=0).to("cuda", dtype)
    groups = _groups()
    docs = [Document(groups[0].prompt_ids, groups[0].responses)] + \
        [Document(g.prompt_ids, [r]) for g in groups[1:] for r in g.responses]

    def run(fn):
        model.zero_grad(set_to_none=True)
        lps = fn()
        torch.stack([lp.float().sum() for lp in lps]).sum().backward()
        return [lp.detach().float() for lp in lps], {n: p.grad.float() for n, p in model.named_parameters()}
    got, got_g = run(lambda: varlen_logprobs(model, docs))
    want, want_g = run(lambda: [lp for g in groups for lp in unpacked_logprobs(model, g.prompt_ids, g.responses)])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=lp_tol, rtol=0)
    for name, b in want_g.items():
        torch.testing.assert_close(got_g[name], b, rtol=g_tol, atol=g_tol * b.abs().max().item(), msg=name)


@pytest.mark.e2e
@pytest.mark.parametrize("sets, env, says", [
    (["train.micro_batch_tokens=50"], {}, "train.micro_batch_tokens=50 is smaller than the longest sequence"),
    (["engine.compile=train"], {"CXX": "/nonexistent/c++"}, "engine.compile=train needs a C++ compiler"),
], ids=["budget", "compile"])
def test_cli_refuses_before_any_cell(tmp_path, sets, env, says):
    """Bad input for both keys: exit 2 with the message, no run folder (the checks before any cell)."""
    from conftest import TINY
    from support.cli import rlbench

    args = [a for s in sets for a in ("--set", s)]
    proc = rlbench("run", "--config", str(TINY), "--out", str(tmp_path), "--ablation", "none", "--no-progress",
                   *args, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert says in proc.stderr
    if "budget" in says:
        assert "= 128 tokens" in proc.stderr and "at least 128" in proc.stderr  # both numbers
    assert not list(tmp_path.iterdir())
