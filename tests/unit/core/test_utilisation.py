"""Per-stage work counts and utilisation (core/results/utilisation.py) against hand-computed values, and the
peak probe's cache (core/devices/peak.py)."""
import json

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlbench.core.devices import peak
from rlbench.core.results.utilisation import model_shape, stage_work, utilisation

SHAPE = {"matmul_params": 1000, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 8, "param_bytes": 4}
# one group: prompt 10, responses 3 and 5; one group: prompt 4, response 2
SAMPLES = [{"prompt": 0, "prompt_len": 10, "response_len": 3}, {"prompt": 0, "prompt_len": 10, "response_len": 5},
           {"prompt": 1, "prompt_len": 4, "response_len": 2}]
ATT = 4 * 2 * 4 * 8  # 4 L H Dh


def test_training_stages_count_two_n_per_token_plus_attention():
    w = stage_work(SHAPE, SAMPLES, [], shared_prompt=False, tri_model=False, kl=True)
    tokens, seq_sq = 13 + 15 + 6, 13 ** 2 + 15 ** 2 + 6 ** 2
    fwd = 2 * 1000 * tokens + ATT * seq_sq
    assert w["old_logprob"]["flops"] == w["ref_logprob"]["flops"] == fwd
    assert w["update"]["flops"] == 3 * fwd
    tri = stage_work(SHAPE, SAMPLES, [], shared_prompt=False, tri_model=True, kl=True)
    assert tri["update"]["flops"] == 4 * fwd  # the reference forward rides in the update pass


def test_shared_prompt_counts_each_prompt_once():
    w = stage_work(SHAPE, SAMPLES, [], shared_prompt=True, tri_model=False, kl=True)
    tokens = (10 + 3 + 5) + (4 + 2)
    seq_sq = (100 + 2 * 10 * 3 + 9 + 2 * 10 * 5 + 25) + (16 + 2 * 4 * 2 + 4)
    assert w["old_logprob"]["flops"] == 2 * 1000 * tokens + ATT * seq_sq


def test_rollout_flops_and_bytes():
    w = stage_work(SHAPE, SAMPLES, [{"decode_steps": 6}, None], shared_prompt=False, tri_model=False, kl=True)
    context = (3 * 10 + 3) + (5 * 10 + 10) + (2 * 4 + 1)  # sum over generated tokens of the keys before them
    prefill = 2 * 1000 * 14 + ATT * (100 + 16)
    assert w["rollout"]["flops"] == prefill + 2 * 1000 * 10 + ATT * context
    kv = 2 * 2 * 2 * 8 * 4  # K and V, layers, kv heads, head dim, bytes
    assert w["rollout"]["bytes"] == 6 * 1000 * 4 + context * kv
    assert "bytes" not in stage_work(SHAPE, SAMPLES, [], shared_prompt=False, tri_model=False, kl=True)["rollout"]


def test_utilisation_divides_by_the_stage_seconds_and_the_peak():
    its = [{"work": {"update": {"flops": 6e9}, "ref_logprob": {"flops": 1e9}, "rollout": {"flops": 1e9, "bytes": 4e9}},
            "stage_s": {"update": 2.0, "rollout": 1.0}},
           {"work": {"update": {"flops": 2e9}}, "stage_s": {"update": 2.0}}]
    u = utilisation(its, {"matmul_flops_per_s": 1e10, "copy_bytes_per_s": 8e9})
    assert u["update"] == {"flops_per_s": 2e9, "mfu": pytest.approx(0.2)}
    assert "ref_logprob" not in u  # no seconds: the stage did not run
    assert u["rollout"]["bw_util"] == pytest.approx(0.5) and u["rollout"]["mfu"] == pytest.approx(0.1)
    assert utilisation(its, None) == {}


def test_model_shape_counts_every_matmul_weight():
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=48)
    shape = model_shape(Qwen2ForCausalLM(cfg))
    per_layer = 32 * 32 + 2 * (32 * 16) + 32 * 32 + 3 * 32 * 48  # q, k, v (GQA), o, gate/up/down
    assert shape["matmul_params"] == 2 * per_layer + 64 * 32  # lm_head included
    assert (shape["layers"], shape["heads"], shape["kv_heads"], shape["head_dim"]) == (2, 4, 2, 8)


def test_peak_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(peak, "MATMUL_N", {"cpu": 64, "accel": 64})
    monkeypatch.setattr(peak, "COPY_BYTES", {"cpu": 1 << 20, "accel": 1 << 20})
    monkeypatch.setattr(peak, "_load", lambda: 0.5)
    first = peak.peak(torch.device("cpu"), torch.float32)
    assert first["matmul_flops_per_s"] > 0 and first["copy_bytes_per_s"] > 0 and first["threads"] == 1
    assert peak.cache_path().is_file()
    monkeypatch.setattr(peak, "measure", lambda *a, **k: pytest.fail("measured again"))
    assert peak.peak(torch.device("cpu"), torch.float32) == first


def test_attention_peak_is_measured_per_head_width_and_cached(tmp_path, monkeypatch):
    """engine.shared_prompt=auto's attention rate: SDPA forward + backward at the model's head width, cached
    beside the device's peak under the same key; a real (small) probe, FLOPs over seconds."""
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(peak, "MATMUL_N", {"cpu": 64, "accel": 64})
    monkeypatch.setattr(peak, "COPY_BYTES", {"cpu": 1 << 20, "accel": 1 << 20})
    monkeypatch.setattr(peak, "ATTENTION", {"cpu": (128, 64), "accel": (128, 64)})
    monkeypatch.setattr(peak, "_load", lambda: 0.5)
    cpu = torch.device("cpu")
    narrow, wide = peak.attention_peak(cpu, torch.float32, 8), peak.attention_peak(cpu, torch.float32, 32)
    assert narrow > 0 and wide > 0
    cached = json.loads((tmp_path / "peak.json").read_text())
    (entry,) = cached.values()
    assert {k: v["flops_per_s"] for k, v in entry["attention"].items()} == {"8": narrow, "32": wide}
    assert "matmul_flops_per_s" in entry
    monkeypatch.setattr(peak, "attention_flops_per_s", lambda *a, **k: pytest.fail("measured again"))
    assert peak.attention_peak(cpu, torch.float32, 8) == narrow
    # measured while every CPU was taken: measured again once the machine is quieter, keeping the better
    entry["attention"]["8"]["load"] = 3.0
    (tmp_path / "peak.json").write_text(json.dumps(cached))
    monkeypatch.setattr(peak, "attention_flops_per_s", lambda *a, **k: narrow / 2)
    assert peak.attention_peak(cpu, torch.float32, 8) == narrow
    monkeypatch.setattr(peak, "attention_flops_per_s", lambda *a, **k: pytest.fail("measured again"))
    assert peak.attention_peak(cpu, torch.float32, 8) == narrow


def test_a_peak_measured_on_a_busy_machine_is_measured_again_when_quiet(tmp_path, monkeypatch):
    """A probe that shared every CPU with other work reads low (once 29x): it is not kept as the peak once
    the machine is quieter; each probe keeps the better of the two measurements, and a quiet one stays."""
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path))
    runs = iter([{"matmul_flops_per_s": 5e9, "copy_bytes_per_s": 4e9, "launch_s_per_op": 5e-5,
                  "host_copy_bytes_per_s": None},
                 {"matmul_flops_per_s": 1.4e11, "copy_bytes_per_s": 3e9, "launch_s_per_op": 6e-6,
                  "host_copy_bytes_per_s": None}])
    monkeypatch.setattr(peak, "measure", lambda *a, **k: dict(next(runs)))
    monkeypatch.setattr(peak, "_load", lambda: 3.0)  # every CPU taken, and more
    busy = peak.peak(torch.device("cpu"), torch.float32)
    assert busy["matmul_flops_per_s"] == 5e9 and busy["load"] == 3.0
    assert peak.peak(torch.device("cpu"), torch.float32) == busy  # as busy now: not measured again
    monkeypatch.setattr(peak, "_load", lambda: 0.2)
    quiet = peak.peak(torch.device("cpu"), torch.float32)
    assert (quiet["matmul_flops_per_s"], quiet["copy_bytes_per_s"], quiet["launch_s_per_op"]) == (1.4e11, 4e9, 6e-6)
    monkeypatch.setattr(peak, "measure", lambda *a, **k: pytest.fail("measured again"))
    assert peak.peak(torch.device("cpu"), torch.float32) == quiet
