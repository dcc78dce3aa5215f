"""engine.compile: the default by device, the refusal where inductor cannot compile, and compiled == eager
(CPU: inductor's C++ backend, fp32; CUDA: a `gpu` test in the bf16 tolerance of tests/unit/engines/test_cuda.py)."""
from __future__ import annotations

import copy

import pytest
import torch

from rlbench.core.config_files import load_config
from rlbench.core.devices import device as dev
from rlbench.core.errors import UserError
from rlbench.engines.factory import check_supported
from rlbench.engines.model.compiled import CompileLog, compile_model
from rlbench.engines.model.tiny import build_tiny
from rlbench.engines.model.tokenizer import CharTokenizer
from rlbench.engines.rollout.base import PromptRequest, SamplingParams
from rlbench.engines.rollout.sampler import BuiltinSampler
from rlbench.engines.trainer.packing import packed_logprobs, unpacked_logprobs
from rlbench.engines.trainer.packing_varlen import Document, varlen_logprobs


def test_the_default_is_all_on_cuda_and_off_elsewhere():
    assert dev.compile_targets(None, "cuda") == ("decode", "train")
    assert dev.compile_targets(None, "cpu") == dev.compile_targets("off", "cuda") == ()
    assert dev.compile_targets("decode", "cpu") == ("decode",)
    assert load_config(None, []).engine.compile is None  # resolved by the device, in device.py only


def test_no_cpp_compiler_is_refused_naming_the_key_and_why(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    monkeypatch.setattr(dev.shutil, "which", lambda name: None)
    problem = dev.compile_problem("train", "cpu")
    assert "engine.compile=train" in problem and "C++ compiler" in problem
    assert dev.compile_problem(None, "cpu") is None and dev.compile_problem("off", "cpu") is None
    cfg = load_config(None, ["engine.compile=all"])
    with pytest.raises(UserError, match="engine.compile=all needs a C\\+\\+ compiler"):
        check_supported(cfg)  # the check before any cell (bench/run/around.py check_fits)


def test_no_triton_on_cuda_is_refused(monkeypatch):
    monkeypatch.setattr(dev.importlib.util, "find_spec", lambda name: None)
    problem = dev.compile_problem(None, "cuda")
    assert problem.startswith("engine.compile=unset (all on cuda) needs Triton")
    assert dev.compile_problem("off", "cuda") is None


def test_off_reads_as_off_though_yaml_reads_it_as_false():
    assert load_config(None, ["engine.compile=off"]).engine.compile == "off"
    assert load_config(None, ["engine.compile=true"]).engine.compile == "all"


def test_a_bad_value_names_the_choices():
    with pytest.raises(Exception, match="'off', 'decode', 'train' or 'all'"):
        load_config(None, ["engine.compile=fast"])


def _model(device="cpu", dtype=torch.float32):
    cfg = load_config(None, ["model.num_layers=2"])
    return build_tiny(cfg.model, CharTokenizer().vocab_size, seed=0).to(device, dtype)


def _logprobs_and_grads(model, fn):
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 60, (9,), generator=g).tolist()
    responses = [torch.randint(3, 60, (n,), generator=g).tolist() for n in (5, 2, 8)]
    model.zero_grad(set_to_none=True)
    lps = fn(model, prompt, responses)
    torch.stack([lp.sum() for lp in lps]).sum().backward()
    return [lp.detach().float() for lp in lps], {n: p.grad.float() for n, p in model.named_parameters()}


def _varlen(model, prompt, responses):
    return varlen_logprobs(model, [Document(prompt, [r]) for r in responses] + [Document(prompt, responses)])


def _compare(device, dtype, lp_tol, g_tol):
    eager = _model(device, dtype)
    compiled = copy.deepcopy(eager)
    compile_model(compiled)
    before = CompileLog.stats()["compiles"] + CompileLog.stats()["recompiles"]
    for fn in (unpacked_logprobs, _varlen, packed_logprobs):
        (a_lp, a_g), (b_lp, b_g) = _logprobs_and_grads(eager, fn), _logprobs_and_grads(compiled, fn)
        for a, b in zip(a_lp, b_lp):
            torch.testing.assert_close(b, a, atol=lp_tol, rtol=0)
        for name, a in a_g.items():
            torch.testing.assert_close(b_g[name], a, rtol=g_tol, atol=g_tol * a.abs().max().item(), msg=name)
    stats = CompileLog.stats()
    assert stats["compiles"] + stats["recompiles"] > before and stats["seconds"] > 0  # it did compile
    assert stats["recompiles"] <= 16  # dynamic shapes: a handful of graphs, not one per length


def _decode(device, dtype, tol):
    """The sampler's prefill and decode steps (slot_forward.py), compiled against eager, and its tokens."""
    model = _model(device, dtype)
    ids = torch.randint(3, 60, (14,), generator=torch.Generator().manual_seed(1)).tolist()
    eager = BuiltinSampler(copy.deepcopy(model), 1, max_num_seqs=4)
    compiled = BuiltinSampler(copy.deepcopy(model), 1, max_num_seqs=4)
    compiled.compile()
    torch.testing.assert_close(compiled.debug_logits(ids, 6), eager.debug_logits(ids, 6), atol=tol, rtol=0)
    sp = SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=0)
    started = CompileLog.stats()
    groups = [compiled.generate([PromptRequest(0, ids[:6])], sp), eager.generate([PromptRequest(0, ids[:6])], sp)]
    assert "compile" in compiled.last_stats and "compile" not in eager.last_stats
    # compiled at start-up (compile()), not in the steps: the same graphs serve every batch and length
    assert CompileLog.stats()["compiles"] == started["compiles"]
    assert CompileLog.stats()["recompiles"] == started["recompiles"]
    return groups


@pytest.mark.e2e
def test_compiled_equals_eager_on_cpu():
    """Inductor's C++ backend (tens of seconds of compilation on 2 cores when its cache is cold: e2e)."""
    _compare("cpu", torch.float32, 1e-5, 1e-4)
    compiled, eager = _decode("cpu", torch.float32, 1e-4)
    assert compiled[0].responses == eager[0].responses  # fp32: the same draws


@pytest.mark.e2e
@pytest.mark.slow  # counts kernels (scripts/micro_kernels.py): a measurement of what compiling buys
def test_compiled_passes_run_fewer_kernels_on_every_path():
    """scripts/micro_kernels.py at the tiny shape (it checks compiled == eager first): every trainer path,
    with and without grad, runs fewer kernels compiled; HF's forward, whose layers compile whole, less than
    half of them in training."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from micro_kernels import PATHS, measure

    counts = measure("tiny", 2, torch.device("cpu"), torch.float32, 9, [5, 2, 8], None)
    assert set(counts) == set(PATHS)
    for c in counts.values():
        assert c["train_compiled"] < 0.8 * c["train_eager"] and c["nograd_compiled"] < 0.8 * c["nograd_eager"]
    assert counts["unpacked"]["train_compiled"] < 0.5 * counts["unpacked"]["train_eager"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_equals_eager_on_cuda_in_bf16():
    _compare("cuda", torch.bfloat16, 0.25, 0.05)  # tests/unit/engines/test_cuda.py's bf16 tolerances
    _decode("cuda", torch.bfloat16, 0.25)  # replayed as CUDA graphs (rollout.cuda_graphs unset: on)


def test_a_phase_inside_another_counts_as_itself_only(monkeypatch):
    """The compile phase runs inside a worker's optimizer_ref (the trainer's) or weights_in (the sampler's):
    the outer phase leaves its seconds out, so the phases still add up to the start-up."""
    from rlbench.core.record import lifecycle
    from rlbench.core.record.lifecycle import Phase

    clock = iter([0.0, 1.0, 4.0, 6.0])  # outer starts, inner starts, inner ends (3 s), outer ends (6 s)
    monkeypatch.setattr(lifecycle.time, "monotonic", lambda: next(clock))
    lifecycle.begin_phases(False)
    with lifecycle.phase(Phase.OPTIMIZER):
        with lifecycle.phase(Phase.COMPILE):
            pass
    assert lifecycle.phases() == {"optimizer_ref": 3.0, "compile": 3.0}


def test_a_copy_of_a_compiled_model_runs_its_own_weights():
    """A deepcopy (a rollout copy of the policy) must never call the original's modules, which would run
    with the original's weights: it gets the class's compiled forward (shared by every instance), bound to
    itself."""
    model = _model()
    compile_model(model)
    layer = model.model.layers[0]
    assert layer.forward.__self__ is layer and layer.forward.__func__ is not type(layer).forward  # compiled, bound
    copied = copy.deepcopy(model).model.layers[0]
    assert copied.forward.__self__ is copied and copied.forward.__func__ is layer.forward.__func__


def test_recompiles_past_the_bound_are_logged_once(monkeypatch, caplog):
    from types import SimpleNamespace

    from rlbench.engines.model import compiled

    monkeypatch.setattr(CompileLog, "recompiles", compiled.RECOMPILE_BOUND)
    monkeypatch.setattr(CompileLog, "warned", False)
    monkeypatch.setattr(CompileLog, "_started", {})
    with caplog.at_level("WARNING", logger=compiled.__name__):
        for n in (1, 2):
            CompileLog._start(SimpleNamespace(compile_id=f"7/{n}"))
            CompileLog._end(SimpleNamespace(compile_id=f"7/{n}"))
    assert CompileLog.recompiles == compiled.RECOMPILE_BOUND + 2
    assert [r.getMessage() for r in caplog.records] == [
        f"engine.compile: {compiled.RECOMPILE_BOUND + 1} recompilations in this process (bound "
        f"{compiled.RECOMPILE_BOUND}): a shape or mode keeps failing the compiled "
        "graphs' guards (TORCH_LOGS=recompiles shows which); each costs compile time"]
