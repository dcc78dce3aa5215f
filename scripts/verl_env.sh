#!/usr/bin/env bash
# Create .venv-verl: a CPU-only venv holding VERL's real code, used to produce and check the test
# fixtures of the VERL and MindSpeed-RL adapters (engines/external/). It does NOT train with VERL
# (that needs GPUs and vLLM): it imports VERL's trainer config, file logger, metric functions, data
# set class and GSM8K reward (scripts/make_verl_fixture.py, scripts/verl_check.py), and gives
# scripts/make_mindspeed_fixture.py the torch/ray/hydra that MindSpeed-RL's modules import.
# Usage: bash scripts/verl_env.sh    (idempotent; VERL_VENV=path picks another folder)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VERL_VENV:-.venv-verl}
VERL_VERSION=${VERL_VERSION:-0.9.1}
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt"
# CPU torch from the machine's disk, pinned so that nothing pulls a CUDA build.
$PIP torch==2.13.0
# VERL without its dependency list (wandb, tensorboard, vLLM-era pins: not needed on CPU)...
$PIP "verl==${VERL_VERSION}" --no-deps
# ...then what the imported modules need (verl 0.9.1's own pins where it has them).
$PIP "numpy>=2" "tensordict==0.10.0" "transformers>=5.10,<5.11" "pyarrow>=19" "TransferQueue>=0.1.10" \
    omegaconf hydra-core ray codetiming orjson pandas packaging dill datasets pybind11 pylatexenc \
    torchdata pyzmq msgspec accelerate peft fastapi uvicorn pillow cachetools psutil
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import verl.trainer.ppo.v1.trainer_base, verl.utils.tracking, verl.utils.reward_score.gsm8k  # noqa: F401
print("verl", md.version("verl"), "torch", md.version("torch"))
PY
echo "verl_env.sh: $VENV ready in $(( $(date +%s) - start )) s"
