"""The rollout backends' builders, by their records (core/components.py BACKENDS): one line per
backend. build(spec, model_config, eos_token_id, max_num_seqs, device, make_model, state,
own_process_group=) -> the backend (engines/rollout/base.py). vLLM itself is imported when its
backend is built, not here."""
from rlbench.core.components import BUILTIN, VLLM
from rlbench.engines.rollout import sampler, vllm_backend

BUILDERS = {BUILTIN.name: sampler.build, VLLM.name: vllm_backend.build}
