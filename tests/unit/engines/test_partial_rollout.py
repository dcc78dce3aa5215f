"""Partial rollout in the built-in sampler (engines/rollout/sampler.py `generate(..., poll=...)`): new
weights at a token boundary, the sequences in flight continued, every token's version recorded; and the
decoupled loss reading those versions per token (engines/trainer/grpo.py)."""
import pytest
import torch

from rlbench.engines.rollout.base import SamplingParams
from rlbench.engines.rollout.sampler import BuiltinSampler
from test_sampler import NO_EOS, by_index, prompts, tiny

pytestmark = pytest.mark.usefixtures("one_thread")

SP = SamplingParams(n=2, max_new_tokens=16, seed=3, iteration=1)


def _state(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _poll_at(call: int, state: dict, version: int = 1):
    """A poll that hands over (state, version) on its call-th call (1-based), and None otherwise."""
    calls = [0]

    def poll():
        calls[0] += 1
        return (state, version) if calls[0] == call else None
    return poll


def _token_logprobs(model, prompt: list[int], resp: list[int]) -> torch.Tensor:
    """[R] log p(resp[t] | prompt, resp[:t]) under `model`, temperature 1 (a full forward pass)."""
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt + resp])).logits[0].double(), -1)
    P = len(prompt)
    return logp[P - 1:-1].gather(1, torch.tensor(resp)[:, None])[:, 0]


def test_a_poll_that_never_updates_changes_nothing():
    model = tiny()
    plain = by_index(BuiltinSampler(model, NO_EOS, max_num_seqs=4).generate(prompts(3), SP))
    polled = by_index(BuiltinSampler(model, NO_EOS, max_num_seqs=4).generate(prompts(3), SP, poll=lambda: None))
    for i, g in plain.items():
        assert polled[i].responses == g.responses and polled[i].behaviour_logprobs == g.behaviour_logprobs
        assert polled[i].token_versions is None and polled[i].version == 0


@pytest.mark.parametrize("resume_kv", ["recompute", "keep"])
def test_unchanged_weights_under_a_new_version_sample_the_same_tokens(resume_kv):
    """Reloading the same weights mid-sequence (version 0 -> 1) must not change what is sampled; only
    the versions say where the interruption fell."""
    model = tiny()
    plain = by_index(BuiltinSampler(model, NO_EOS, max_num_seqs=4).generate(prompts(3), SP))
    s = BuiltinSampler(model, NO_EOS, max_num_seqs=4, resume_kv=resume_kv)
    got = by_index(s.generate(prompts(3), SP, poll=_poll_at(6, _state(model))))
    assert s.last_stats["reloads"] == 1
    assert s.last_stats["recomputed_tokens"] > 0 if resume_kv == "recompute" else s.last_stats["recomputed_tokens"] == 0
    mixed = 0
    for i, g in plain.items():
        assert got[i].responses == g.responses
        for a, b in zip(got[i].behaviour_logprobs, g.behaviour_logprobs):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)
        if got[i].token_versions is not None:
            mixed += 1
            assert got[i].version == 0
            for v in got[i].token_versions:
                assert v == sorted(v) and set(v) <= {0, 1}
    assert mixed >= 1


def test_new_weights_mid_sequence_recompute_every_token_by_its_own_version():
    """resume_kv=recompute: each token's behaviour log-prob is exactly the full-forward log-prob of the
    weights its version names (old before the interruption, new after, for the whole prefix), including
    samples admitted after the interruption from a prompt prefilled before it."""
    old, new = tiny(seed=0), tiny(seed=1)
    # 6 samples in 3 slots: prompt 1 is prefilled for its first sample before the interruption and its
    # second sample is admitted after it, from a prefill that must then be redone under the new weights
    s = BuiltinSampler(tiny(seed=0), NO_EOS, max_num_seqs=3, resume_kv="recompute")
    groups = s.generate(prompts(3), SP, poll=_poll_at(5, _state(new)))
    assert s.version == 1
    seen = set()
    for g in groups:
        versions = g.token_versions or [[g.version] * len(r) for r in g.responses]
        for resp, lps, v in zip(g.responses, g.behaviour_logprobs, versions):
            assert len(v) == len(resp) and v == sorted(v)
            seen.update(v)
            want = {0: _token_logprobs(old, g.prompt_ids, resp), 1: _token_logprobs(new, g.prompt_ids, resp)}
            for t, ver in enumerate(v):
                assert lps[t] == pytest.approx(float(want[ver][t]), abs=1e-4), (g.prompt_index, t, ver)
    assert seen == {0, 1}
    assert any(g.token_versions is not None for g in groups)


def test_keep_continues_on_the_stale_cache():
    """resume_kv=keep: the tokens after an interruption come from new weights over old K/V, so they are
    not the new weights' full-forward log-probs (which recompute gives)."""
    new = tiny(seed=1)
    s = BuiltinSampler(tiny(seed=0), NO_EOS, max_num_seqs=6, resume_kv="keep")  # all 6 in flight at once
    groups = s.generate(prompts(3), SP, poll=_poll_at(5, _state(new)))
    gaps = []
    for g in groups:
        assert g.token_versions is not None  # every sample straddles the interruption
        for resp, lps, v in zip(g.responses, g.behaviour_logprobs, g.token_versions):
            want = _token_logprobs(new, g.prompt_ids, resp)
            gaps += [abs(lps[t] - float(want[t])) for t, ver in enumerate(v) if ver == 1]
    assert max(gaps) > 1e-3


def test_a_sample_admitted_after_a_reload_has_its_own_behaviour_version():
    """One slot for a group of two: sample 0 straddles the reload (versions 0 then 1), sample 1 is admitted
    after it (all version 1). The group's oldest token is version 0, but sample 1's behaviour version, in
    samples.jsonl too, is its own oldest token's: 1."""
    from types import SimpleNamespace

    from rlbench.run.iteration_log import _sample_rows

    s = BuiltinSampler(tiny(seed=0), NO_EOS, max_num_seqs=1, resume_kv="recompute")  # fewer slots than G
    (g,) = s.generate(prompts(1), SP, poll=_poll_at(5, _state(tiny(seed=1))))
    assert g.version == 0 and set(g.token_versions[0]) == {0, 1} and set(g.token_versions[1]) == {1}
    assert [g.sample_version(j) for j in range(2)] == [0, 1]
    out = SimpleNamespace(groups=[g], rewards={g.prompt_index: [0.0, 1.0]}, trained_version=2)
    rows = _sample_rows(5, out)
    assert [r["behaviour_version"] for r in rows] == [0, 1]
    assert [r["tokens_by_version"] for r in rows] == [
        {"0": g.token_versions[0].count(0), "1": g.token_versions[0].count(1)}, {"1": SP.max_new_tokens}]


# ---------------------------------------------------------------- the schedule (engine.partial_rollout)

def test_without_a_weight_change_mid_sequence_it_is_bounded_async_bitwise():
    """k = 0: a batch starts on the newest weights and the next version exists only after the batch is
    trained, so no weight change falls inside a sequence: samples and parameters equal bounded-async's."""
    from test_bounded_async import _train_params

    base = ["engine.schedule=bounded_async", "engine.max_staleness=0", "engine.consume_order=dispatch"]
    init, plain, p_samples, _ = _train_params(base)
    _, partial, q_samples, _ = _train_params(base + ["engine.partial_rollout=true"])
    assert p_samples == q_samples
    assert any(not torch.equal(init[n], plain[n]) for n in plain)  # training moved the weights
    for n in plain:
        assert torch.equal(partial[n], plain[n]), n


@pytest.mark.e2e
def test_a_real_run_interrupts_sequences_and_records_every_tokens_version(tmp_path):
    """k = 2, long responses, the rollout worker's decode step made 6x slower (RLBENCH_SLOW) so that the
    trainer steps while sequences are in flight, and fewer slots than a group's samples (max_num_seqs 3,
    G 4), so that samples start after a reload: some responses hold tokens of two versions, recorded in
    samples.jsonl, every sample's behaviour version is its own oldest token's, and no token is more than
    k versions older than the weights it trains."""
    import json

    from conftest import TINY
    from support.cli import only_run, rlbench, sets

    overrides = sets("engine.schedule=bounded_async", "engine.max_staleness=2", "engine.partial_rollout=true",
                     "train.prompts_per_iteration=2", "rollout.response_length=fixed",
                     "rollout.response_length_mean=96", "rollout.max_new_tokens=96", "rollout.max_num_seqs=3",
                     "run.iterations=4", "run.warmup_iterations=1")
    proc = rlbench("run", "--config", TINY, "--ablation", "none", *overrides, "--out", tmp_path, "--no-progress",
                   "--no-report", env={"RLBENCH_SLOW": "decode:5.0"}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (cell,) = [p for p in only_run(tmp_path).iterdir() if (p / "results.json").is_file()]
    res = json.loads((cell / "results.json").read_text())
    assert res["switches"]["partial_rollout"] is True
    samples = [json.loads(line) for line in (cell / "samples.jsonl").read_text().splitlines()]
    mixed = [s for s in samples if len(s.get("tokens_by_version", {})) > 1]
    assert mixed, "no response held tokens of two versions"
    for s in samples:
        versions = {int(v): n for v, n in s.get("tokens_by_version", {str(s["behaviour_version"]): 1}).items()}
        assert min(versions) == s["behaviour_version"] and max(versions) == s.get("behaviour_version_newest", min(versions))
        assert 0 <= s["trained_version"] - s["behaviour_version"] <= 2
        if "tokens_by_version" in s:
            assert sum(versions.values()) == s["response_len"]
    reloads = sum(w.get("reloads", 0) for it in res["rollout_stats"] for w in it["workers"])
    recomputed = sum(w.get("recomputed_tokens", 0) for it in res["rollout_stats"] for w in it["workers"])
    assert reloads >= 1 and recomputed > 0  # resume_kv=recompute rebuilt the prefixes' K/V


@pytest.mark.parametrize("sets,message", [
    (["engine.partial_rollout=true"], "is an option of engine.schedule=bounded_async"),
    (["engine.schedule=bounded_async", "engine.partial_rollout=true", "rollout.backend=vllm"], "rollout.backend=builtin"),
    (["engine.schedule=bounded_async", "engine.partial_rollout=true", "engine.launcher=ray"], "engine.launcher=local"),
])
def test_partial_rollout_is_refused_where_it_cannot_run(sets, message):
    from rlbench.core.config_files import load_config
    from rlbench.core.errors import UserError

    with pytest.raises(UserError, match=message):
        load_config(None, sets)
