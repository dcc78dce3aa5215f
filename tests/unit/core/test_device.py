"""The device module: the one place with CPU/CUDA/NPU branches; torch_npu only when asked for."""
import subprocess
import sys

import pytest
import torch

from rlbench.core.devices import device as dev
from rlbench.core.errors import UserError

HAS_CUDA = torch.cuda.is_available()


def test_cpu_resolve_and_memory():
    d = dev.resolve("cpu")
    assert d.type == "cpu"
    m = dev.memory(d)
    assert m["peak_rss"] > 10 * 2**20  # this process holds torch: well over 10 MiB
    assert m.get("total", m["peak_rss"]) >= m["peak_rss"]
    dev.reset_peak_memory(d)  # a no-op on CPU, not an error
    info = dev.describe(d)
    assert info["type"] == "cpu" and info["cpu_count"] >= 1


def test_auto_without_accelerators_is_cpu():
    if HAS_CUDA:
        pytest.skip("a CUDA device is visible: auto resolves to it")
    assert dev.resolve("auto").type in ("cpu", "npu")


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is visible")
def test_cuda_missing_is_a_clear_error():
    with pytest.raises(UserError, match="no CUDA device"):
        dev.resolve("cuda")


def test_npu_missing_is_a_clear_error():
    try:
        import torch_npu  # noqa: F401
        pytest.skip("torch_npu is installed")
    except ImportError:
        pass
    with pytest.raises(UserError, match="torch_npu"):
        dev.resolve("npu")


def test_torch_npu_not_imported_for_cpu():
    code = ("import sys; from rlbench.core.devices import device as d; d.resolve('cpu'); d.describe(d.resolve('cpu')); "
            "d.memory(d.resolve('cpu')); print('torch_npu' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_dtypes():
    cpu = torch.device("cpu")
    assert dev.dtype("bfloat16", cpu) is torch.bfloat16
    assert dev.dtype("float32") is torch.float32 and dev.dtype("float16", cpu) is torch.float16
    with pytest.raises(UserError, match="allowed"):
        dev.dtype("float8", cpu)


def test_model_dtype_is_applied_when_loading(tmp_path):
    """model.dtype reaches the policy for every kind (the tiny model is warm-started in float32)."""
    from rlbench.core.config_files import load_config
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.model.loader import load_policy

    from conftest import TINY

    # dtype is part of the warm start's cache key: 1 step instead of cpu-tiny's 120 (the path is the same)
    cfg = load_config(TINY, ["model.dtype=bfloat16", "model.warmstart_steps=1"])
    policy, _, info = load_policy(cfg, load_dataset(cfg.data, cfg.run.seed))
    assert {p.dtype for p in policy.parameters()} == {torch.bfloat16} and info["dtype"] == "bfloat16"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_memory_and_sync():
    d = dev.resolve("cuda")
    dev.reset_peak_memory(d)
    x = torch.ones(1024, 1024, device=d)
    dev.synchronize(d)
    m = dev.memory(d)
    assert m["peak_allocated"] >= x.numel() * 4 and m["total"] > m["peak_allocated"]
    info = dev.describe(d)
    assert info["count"] >= 1 and info["memory_total"] == m["total"]
    with dev.range_context("rlbench-test", d):
        x.sum().item()


@pytest.mark.npu
def test_npu_memory_and_sync():
    pytest.importorskip("torch_npu", reason="needs torch_npu and an Ascend NPU")
    if not torch.npu.is_available():
        pytest.skip("torch_npu is installed but no NPU is visible")
    d = dev.resolve("npu")
    x = torch.ones(1024, 1024, device=d)
    dev.synchronize(d)
    assert dev.memory(d)["peak_allocated"] >= x.numel() * 4
    assert dev.describe(d)["count"] >= 1


# --- which accelerator each worker process sees (issue 26: placement correct before it first runs) ---


def _worker_envs(kind: str, rollout: int, train: int, share: bool, parent_env: dict) -> dict[str, dict]:
    from rlbench.core.config import RunConfig
    from rlbench.core.config_files import with_overrides
    from rlbench.core.devices.device import visible_env
    from rlbench.core.devices.placement import plan

    out = {}
    for schedule in ("sync", "periodic_async"):
        engine = with_overrides(RunConfig(), {"engine": {"schedule": schedule, "rollout_devices": rollout,
                                                          "train_devices": train, "share_devices": share}}).engine
        p = plan(engine, kind, available=8)
        out |= {f"{schedule}/{s.worker}": visible_env(s.kind, s.index, parent_env) for s in p.slots}
    return out


def test_each_worker_sees_only_its_own_gpu_on_2_and_4_gpu_plans():
    two = _worker_envs("cuda", 1, 1, False, {})
    assert two == {"sync/colocated0": {"CUDA_VISIBLE_DEVICES": "0"}, "sync/colocated1": {"CUDA_VISIBLE_DEVICES": "1"},
                   "periodic_async/rollout0": {"CUDA_VISIBLE_DEVICES": "0"},
                   "periodic_async/trainer0": {"CUDA_VISIBLE_DEVICES": "1"}}
    four = _worker_envs("cuda", 2, 2, False, {})
    assert [four[f"sync/colocated{i}"]["CUDA_VISIBLE_DEVICES"] for i in range(4)] == ["0", "1", "2", "3"]
    assert [four[f"periodic_async/{w}"]["CUDA_VISIBLE_DEVICES"] for w in ("rollout0", "rollout1", "trainer0",
                                                                          "trainer1")] == ["0", "1", "2", "3"]
    one = _worker_envs("cuda", 1, 1, True, {})  # one GPU, pools shared
    assert one["periodic_async/rollout0"] == one["periodic_async/trainer0"] == {"CUDA_VISIBLE_DEVICES": "0"}


def test_an_inherited_visible_list_is_mapped_not_overwritten():
    from rlbench.core.devices.device import visible_env

    four = _worker_envs("cuda", 2, 2, False, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert [four[f"sync/colocated{i}"]["CUDA_VISIBLE_DEVICES"] for i in range(4)] == ["4", "5", "6", "7"]
    assert visible_env("npu", 1, {"ASCEND_RT_VISIBLE_DEVICES": "2,3"}) == {"ASCEND_RT_VISIBLE_DEVICES": "3"}
    assert visible_env("cpu", 1, {}) == {}
    with pytest.raises(UserError, match="makes only 2 visible"):
        visible_env("cuda", 2, {"CUDA_VISIBLE_DEVICES": "4,5"})


@pytest.mark.e2e
def test_a_worker_observes_its_pinned_core_and_threads():
    """A real pinned process reports what the OS gave it (the record placement mismatches are checked on)."""
    import subprocess
    import sys

    code = ("from rlbench.core.devices import device as d; d.pin('cpu', 1, 1); import json; print(json.dumps(d.observe('cpu')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    import json

    seen = json.loads(out)
    assert seen["threads"] == 1 and len(seen["affinity"]) == 1 and "visible" not in seen
