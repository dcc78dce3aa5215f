#!/usr/bin/env bash
# The wheels the prepared GPU command (scripts/gpu_session.sh) installs on a GPU machine without a network:
# what rlbench needs beyond a CUDA PyTorch image (pydantic and its needs) and what the TRL peer needs beyond
# transformers and accelerate (TRL, datasets, and datasets' dill and multiprocess), each at the version this
# checkout's .venv has (the versions its tests ran), for CPython 3.12 on x86-64 Linux by default.
#
#   bash scripts/gpu_wheels.sh                 # -> .whl/ (git-ignored), about 4.5 MB
#   PY_VERSION=3.11 bash scripts/gpu_wheels.sh # another CPython
#
# Downloaded with --no-deps: the image is assumed to hold the rest (numpy, pandas, pyarrow, xxhash, fsspec,
# huggingface-hub, tqdm, pyyaml, jinja2, psutil, accelerate). datasets asks for pyarrow >= 24 but the TRL
# cells ran here with 19.0.1 to 26 (engines/external/trl/data.py train_dataset); pyarrow is not carried (its
# wheel alone is ~50 MB): the GPU command prints the versions it found, and its trl step does not start
# where datasets does not import.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "gpu_wheels.sh: $PY not found: run bash scripts/setup.sh --dev first" >&2; exit 2; }
PACKAGES="pydantic pydantic-core annotated-types typing-inspection trl datasets dill multiprocess"
pins=()
for name in $PACKAGES; do
    version=$("$PY" -c "import sys, importlib.metadata as m; print(m.version(sys.argv[1]))" "$name" 2>/dev/null) || {
        echo "gpu_wheels.sh: $name is not installed in $PY's environment (bash scripts/setup.sh --dev installs it)" >&2
        exit 2
    }
    pins+=("$name==$version")
done
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
mkdir -p .whl
rm -f .whl/*.whl  # one version of each: two would stop the install there
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" --implementation cp \
    "${platforms[@]}" -d .whl "${pins[@]}"
ls -1 .whl
du -sh .whl
