"""The CUDA paths (marked gpu; skipped without a CUDA device): packed == unpacked, the built-in sampler
== HF's forward, and a whole run (sync and periodic-async sharing the one GPU) on engine.device=cuda.

Tolerances on CUDA, first set from the kernels and then checked on an NVIDIA H200 (torch 2.11, CUDA 13;
docs/results/gpu.md):
- fp32: TF32 matmuls are off by default in PyTorch, but SDPA and cuBLAS pick other kernels for other
  shapes, so the packed and unpacked paths round differently: log-probs atol 1e-4, gradients 1e-3 of
  the parameter's largest entry. All three layouts passed on the H200.
- bf16: 8 bits of mantissa; each path rounds every activation, so log-probs differ by up to ~0.15 on
  these std-0.2 weights (a masking bug moves them by 1-10) and gradients by a few % (relative norm).
  Measured on the H200: gather (then named shared_prompt) and mask4d within 0.15 (log-probs and
  gradients); flex 0.155 on 1 of 70 log-probs, its gradients not reached then: atol 0.25, still far below
  a masking bug's 1-10. dense (the lower-right causal bias, flash kernel in bf16) has not run on a GPU yet.
"""
from __future__ import annotations


import pytest
import torch

from rlbench.engines.trainer import packing
from rlbench.engines.trainer.packing_dense import packed_logprobs_dense

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

LAYOUTS = {"dense": packed_logprobs_dense, "gather": packing.packed_logprobs,
           "mask4d": packing.packed_logprobs_mask4d, "flex": packing.packed_logprobs_flex}
TOL = {torch.float32: (1e-4, 1e-3), torch.bfloat16: (0.25, 0.05)}  # (log-prob atol, gradient tolerance)


def _model(dtype):
    import transformers

    cfg = transformers.Qwen2Config(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.0,
                                   max_position_embeddings=1024, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p)) if "norm" in name else p.normal_(0.0, 0.2)
    return model.to("cuda", dtype).train()


def _run(model, fn, prompt, responses):
    model.zero_grad(set_to_none=True)
    lps = fn(model, prompt, responses)
    torch.stack([lp.sum() for lp in lps]).sum().backward()
    return [lp.detach().float() for lp in lps], {n: p.grad.float() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_packed_equals_unpacked_on_cuda(layout, dtype):
    model = _model(dtype)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 64, (200,), generator=g).tolist()
    responses = [torch.randint(0, 64, (n,), generator=g).tolist() for n in (70, 1, 33, 64)]
    ref_lp, ref_g = _run(model, packing.unpacked_logprobs, prompt, responses)
    lp, grads = _run(model, LAYOUTS[layout], prompt, responses)
    lp_tol, g_tol = TOL[dtype]
    for a, b in zip(ref_lp, lp):
        torch.testing.assert_close(b, a, atol=lp_tol, rtol=0)
    for name, a in ref_g.items():
        if dtype == torch.float32:
            torch.testing.assert_close(grads[name], a, rtol=g_tol, atol=g_tol * a.abs().max().item(), msg=name)
        else:
            assert (grads[name] - a).norm() <= g_tol * a.norm() + 1e-6, name


def test_dense_runs_on_the_flash_kernel_alone_in_bf16():
    """With every SDPA kernel but flash disabled, dense still trains: its response attention took the flash
    path of the lower-right bias (a materialised mask would need another kernel and fail here)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = _model(torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 64, (96,), generator=g).tolist()
    responses = [torch.randint(0, 64, (n,), generator=g).tolist() for n in (40, 1, 17)]
    ref_lp, _ = _run(model, packing.unpacked_logprobs, prompt, responses)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        lp, grads = _run(model, packed_logprobs_dense, prompt, responses)
    assert all(torch.isfinite(g).all() for g in grads.values())
    for a, b in zip(ref_lp, lp):
        torch.testing.assert_close(b, a, atol=TOL[torch.bfloat16][0], rtol=0)


def test_host_copy_probe_measures_both_crossings_on_cuda():
    """The peak probe's host copy (what the speedup prediction prices a split layout's weight sync with):
    a real crossing to shared host memory and back, slower than an on-device copy, faster than 0.5 GB/s."""
    from rlbench.core.devices import peak

    rate = peak.host_copy_bytes_per_s(torch.device("cuda"))
    assert 5e8 < rate < peak.measure(torch.device("cuda"), torch.bfloat16)["copy_bytes_per_s"]
    assert peak.host_copy_bytes_per_s(torch.device("cpu")) is None


def test_sampler_logits_match_hf_on_cuda():
    from rlbench.engines.rollout.sampler import BuiltinSampler

    model = _model(torch.float32).eval()
    ids = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([ids], device="cuda")).logits[0].float()
    sampler = BuiltinSampler(model, 64, max_num_seqs=4)
    for prefill_len in (1, 17, 40):
        torch.testing.assert_close(sampler.debug_logits(ids, prefill_len), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.e2e
def test_tiny_run_on_cuda(tmp_path, tiny_config_path):
    """`rlbench run` (sync, barrier, periodic-async) on the GPU: the pools share cuda:0, TPSPD divides by
    1 device, every worker says cuda:0, and the first iteration (same initial weights, per-sample seeds)
    draws the same samples in every cell. Later ones may drift: CUDA reductions are not bitwise equal
    across the two layouts' kernels, and one flipped token changes a sample. The cell processes, which hold
    no device, were forked from `rlbench run`'s fork server (bench/run/ablation.py cell_context): none
    initialised CUDA, and every worker timed its device's initialisation as a start-up phase."""
    from support.cli import only_run, rlbench
    from rlbench.core.results import schema

    proc = rlbench("run", "--config", tiny_config_path, "--out", tmp_path, "--no-progress", "--no-report",
                   "--set", "engine.device=cuda", "--set", "engine.share_devices=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(tmp_path)
    rewards = {}
    for cell in ("sync", "periodic_async_barrier", "periodic_async"):
        res = schema.load_cell(run_dir / cell)
        assert res["devices"] == 1
        assert {p["device"] for p in res["placement"] if p["device"]} == {"cuda:0"}
        for it in res["iterations"]:
            assert it["devices"] == 1 and it["tpspd"] == pytest.approx(it["tokens"] / it["wall_s"])
        rewards[cell] = res["iterations"][0]["reward_mean"]
        driver = next(p for p in res["placement"] if p["worker"] == "driver")
        assert driver["observed"]["cuda_initialized"] is False
        phases = res["lifecycle"]["startup_phases"]
        assert all("device" in phases[p["worker"]] for p in res["placement"] if p["device"])
    assert rewards["periodic_async"] == rewards["sync"] == rewards["periodic_async_barrier"]
