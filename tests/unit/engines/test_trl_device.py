"""The TRL peer on a GPU, everything of it that runs without one: the refusals and the translation by device
kind, a rank's environment (its one visible GPU, LOCAL_RANK 0), the placement its observations are checked
against, the spans timed after the device has run what was queued, and the peer ablations' shared eager
setting. The GPU run itself is a step of the prepared GPU command (scripts/gpu_session.sh, `trl`)."""
import time

import pytest
import torch

from conftest import TINY
from rlbench.core.config_files import load_config
from rlbench.core.errors import UserError, WorkerError
from rlbench.engines import launch as placement_check
from rlbench.engines.external.trl import cost_settings, record, settings
from rlbench.engines.external.trl.launch import rank_env


@pytest.mark.parametrize("device", ["cpu", "cuda", "auto"])
def test_check_takes_cpu_and_cuda(device):
    settings.check(load_config(TINY, [f"engine.device={device}"]), 1)


def test_check_refuses_an_npu_naming_the_key_and_what_is_allowed():
    cfg = load_config(TINY, [])
    cfg.engine.device = "npu"  # config validation would want torch_npu first; check() names the key
    with pytest.raises(UserError, match=r"engine\.device='npu'.*allowed: cpu, cuda, auto"):
        settings.check(cfg, 1)


def test_translation_trains_on_the_gpu_only_where_asked():
    cfg = load_config(TINY, [])
    assert settings.grpo_kwargs(cfg, 1, "out")["use_cpu"] is True
    on_gpu = settings.grpo_kwargs(cfg, 1, "out", kind="cuda")
    assert on_gpu["use_cpu"] is False and on_gpu["bf16"] is False  # the weights' dtype, no autocast, as on CPU
    assert {k: v for k, v in on_gpu.items() if k != "use_cpu"} == \
        {k: v for k, v in settings.grpo_kwargs(cfg, 1, "out").items() if k != "use_cpu"}


def test_a_gpu_rank_sees_its_one_device_as_device_0():
    for rank in (0, 1):
        env = rank_env(rank, 2, 29500, "cuda", environ={})
        assert (env["CUDA_VISIBLE_DEVICES"], env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"],
                env["LOCAL_WORLD_SIZE"]) == (str(rank), str(rank), "2", "0", "1")
    # under an inherited mask, rank 1 is the second device the parent sees
    assert rank_env(1, 2, 29500, "cuda", environ={"CUDA_VISIBLE_DEVICES": "4,5"})["CUDA_VISIBLE_DEVICES"] == "5"
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES"):
        rank_env(1, 2, 29500, "cuda", environ={"CUDA_VISIBLE_DEVICES": "4"})
    cpu = rank_env(1, 2, 29500)
    assert "CUDA_VISIBLE_DEVICES" not in cpu and (cpu["LOCAL_RANK"], cpu["LOCAL_WORLD_SIZE"]) == ("1", "2")


def test_gpu_ranks_are_checked_against_their_visible_device(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    plan = record.placement(2, "cuda")
    assert [s.device for s in plan.slots] == ["cuda:0", "cuda:1"] and plan.kind == "cuda" and plan.devices == 2
    good = {"colocated0": {"threads": 1, "visible": "0"}, "colocated1": {"threads": 1, "visible": "1"}}
    placement_check.check(plan, good)
    with pytest.raises(WorkerError, match="colocated1.*visible: planned '1', observed '0'"):
        placement_check.check(plan, {**good, "colocated1": {"threads": 1, "visible": "0"}})


def test_timed_spans_end_after_the_device_has_run_and_carry_busy_seconds(monkeypatch):
    """update and optimizer_step are timed from TRL's hooks, outside Recorder.stage: each end waits for the
    device first (on a GPU the kernels a backward queued run after the host returns), and each records its
    busy seconds (the thread's CPU seconds on CPU) beside its wall seconds."""
    from rlbench.core.record.stages import Recorder
    from rlbench.engines.external.trl import timing

    synced, events = [], []
    monkeypatch.setattr(timing.dev, "synchronize", lambda device: synced.append((device, time.monotonic())))
    rec = Recorder("colocated0", time.monotonic(), device=torch.device("cpu"), sink=events.append)
    clock = timing.StepClock(rec, out=None, steps_per_iteration=2)
    clock.rows = [{"trained_version": None}]
    clock.update_begins([0])
    x = 0
    for i in range(500_000):
        x += i
    clock.update_ends()
    clock.step_ends(1)  # mid-iteration step (steps_per_iteration=2): only its optimizer step recorded
    assert [e.stage for e in events] == ["update", "optimizer_step"]
    assert len(synced) == 3 and all(d == torch.device("cpu") for d, _ in synced)
    update = events[0]
    assert update.busy is not None and 0 < update.busy <= update.cpu + 1e-9
    assert update.end - update.start >= 0.5 * update.busy


def test_the_cuda_graphs_difference_is_listed_on_a_gpu_only():
    cfg = load_config(TINY, [])
    on_cpu = [d["setting"] for d in settings.differences(cfg)]
    on_gpu = [d["setting"] for d in settings.differences(cfg, kind="cuda")]
    assert sorted(on_gpu) == sorted(on_cpu + [settings.CUDA_GRAPHS.setting])
    cfg.rollout.cuda_graphs = False
    assert [d["setting"] for d in settings.differences(cfg, kind="cuda")] == on_cpu


def test_the_peer_ablations_run_rlbench_eager_as_trl():
    """On CUDA rlbench compiles by default; the peer ablations set engine.compile=off for every cell, and a
    compiled rlbench cell shows in the TRL cell's cost settings as a difference no listed one explains."""
    from rlbench.run.ablation import cells_for

    base = load_config(TINY, ["engine.device=cuda"])
    for name in ("peers", "trl_on_policy"):
        cells = cells_for(name, base, {})
        assert all(c.engine.compile == "off" for _, c in cells), name
    compiled = load_config(TINY, ["engine.device=cuda"])
    assert cost_settings.rlbench_compiles(compiled) and not cost_settings.rlbench_compiles(load_config(TINY, []))
    args = {"torch_compile": False, "generation_batch_size": compiled.batch_size,
            "use_transformers_continuous_batching": False}
    facts = {"dtype": compiled.model.dtype, "checkpointing": False, "attn_implementation": "sdpa"}
    table = cost_settings.compare(args, facts, compiled, listed=[settings.SAMPLING], reference=args)
    assert [u.split(":")[0] for u in cost_settings.unlisted(table)] == ["torch.compile"]


def test_rlbench_evaluation_reads_a_random_models_ids_as_rlbench_does(tmp_path):
    """At a GPU shape (model.kind hf_config, no tokenizer) a random policy samples any of the model's ids:
    rlbench's evaluation of TRL's policy decodes them as rlbench's engine does (past the characters:
    nothing), not as the bare character tokenizer (an IndexError)."""
    from rlbench.engines.external.trl.export import char_tokenizer, rlbench_tokenizer
    from rlbench.engines.model.loader import model_config_and_tokenizer

    cfg = load_config(None, ["model.kind=hf_config", "model.path=models/qwen2.5-0.5b.json"])
    tok = rlbench_tokenizer(tmp_path, cfg)
    ours = model_config_and_tokenizer(cfg)[1]
    ids = tok.encode("#### 42") + [151_000, 2_000]
    assert tok.vocab_size == ours.vocab_size == 151_936
    assert tok.decode(ids) == ours.decode(ids) == "#### 42" == char_tokenizer().decode(ids, skip_special_tokens=True)
