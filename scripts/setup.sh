#!/usr/bin/env bash
# Create .venv and install rlbench (editable) with the CPU build of torch.
# Usage: bash scripts/setup.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
PIP=".venv/bin/python -m pip"
$PIP install -q --disable-pip-version-check -c constraints.txt torch==2.13.0
EXTRAS=""
if [ "${1:-}" = "--dev" ]; then EXTRAS="[dev]"; fi
$PIP install -q --disable-pip-version-check -c constraints.txt -e ".${EXTRAS}"
