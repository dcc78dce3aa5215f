#!/usr/bin/env bash
# The GPU runs of issue 17, on a machine with one NVIDIA GPU, torch (CUDA) and no network, from the
# repository root. pydantic and its needs travel as wheels in .whl/ (docs/platforms/gpu.md).
#
#   bash scripts/gpu_session.sh probe     # GPU tests, micro-benchmarks, a 2-iteration 0.5B-shape run
#   bash scripts/gpu_session.sh ablation  # configs/qwen2.5-0.5b-shape-gpu.yaml --ablation all, flex + tiny-run tests
#   bash scripts/gpu_session.sh packing7b # the shared-prompt train step on the Qwen2.5-7B shape
#   bash scripts/gpu_session.sh quick     # all of the above but 7B in one command of at most ~9.5 min:
#                                         # env, GPU tests, micro, 0.5B --ablation async and all (2 iterations)
#
# Everything goes to ${OUT:-gpu-out}/: log.txt, micro.json, and each run folder as a .tar.gz (traces
# left out).
set -uo pipefail
phase=${1:-probe}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

pack() {  # pack <run folder> -> $OUT/<name>.tar.gz without traces
    tar --exclude=traces -czf "$OUT/$(basename "$1").tar.gz" -C "$(dirname "$1")" "$(basename "$1")"
}

GPU_SET=(--set rollout.backend=builtin)
case "$phase" in
probe)
    echo "== GPU tests"; date
    timeout 170 python3 -m pytest -q -m gpu tests/test_cuda.py tests/test_device.py -p no:cacheprovider
    echo "== micro-benchmarks"; date
    timeout 200 python3 scripts/micro.py --device cuda --out "$OUT/micro.json"
    echo "== 0.5B shape, 2 iterations per cell"; date
    timeout 170 rlbench run --config configs/qwen2.5-0.5b-shape-gpu.yaml --out runs-gpu --no-progress \
        "${GPU_SET[@]}" --set run.iterations=2 --set run.warmup_iterations=1 --set run.name=probe
    for d in runs-gpu/*; do pack "$d"; done
    ;;
ablation)
    echo "== 0.5B shape --ablation all"; date
    timeout 400 rlbench run --config configs/qwen2.5-0.5b-shape-gpu.yaml --ablation all --out runs-gpu \
        --no-progress "${GPU_SET[@]}" "${@:2}"
    for d in runs-gpu/*; do pack "$d"; done
    echo "== GPU tests"; date
    timeout 120 python3 -m pytest -q -m gpu tests/test_cuda.py -p no:cacheprovider --tb=short -k "flex or tiny_run"
    ;;
packing7b)
    echo "== shared-prompt train step on the Qwen2.5-7B shape"; date
    timeout 90 python3 scripts/micro.py --device cuda --model configs/models/qwen2.5-7b.json --only packing \
        --out "$OUT/micro-7b.json"
    ;;
quick)
    # Every step is bounded and independent: one that fails or runs out of time leaves the others' results.
    # The run folders go back as one archive (the device tool returns at most 8 files).
    echo "== rlbench env (bf16 peak)"; date
    timeout 45 rlbench env --dtype bfloat16 --remeasure > "$OUT/env.json"; cat "$OUT/env.json"
    echo "== GPU tests"; date
    timeout 110 python3 -m pytest -q -m gpu tests/test_cuda.py tests/test_device.py -p no:cacheprovider \
        --tb=short -rs
    echo "== micro-benchmarks (0.5B shape, bf16)"; date
    timeout 80 python3 scripts/micro.py --device cuda --batches 1,8,64 --rounds 3 --warmup 1 --out "$OUT/micro.json"
    nvidia-smi dmon -s ut -d 1 > "$OUT/dmon.txt" 2>&1 &
    dmon=$!
    for abl in async all; do
        echo "== 0.5B shape --ablation $abl, 2 iterations per cell"; date
        timeout "$([ $abl = async ] && echo 130 || echo 200)" rlbench run --config configs/qwen2.5-0.5b-shape-gpu.yaml \
            --ablation "$abl" --out runs-gpu --no-progress "${GPU_SET[@]}" --set run.iterations=2 \
            --set run.warmup_iterations=1 --set run.name="qwen05-$abl"
    done
    kill "$dmon" 2>/dev/null
    tar --exclude=traces -czf "$OUT/runs.tar.gz" runs-gpu 2>/dev/null
    ;;
tests)
    # The GPU tests one by one with full tracebacks (a timeout loses pytest's summary), the tiny run's
    # folders kept; then the sampler against HF generate at larger batches.
    for t in "test_packed_equals_unpacked_on_cuda[flex-bf16]" test_tiny_run_on_cuda; do
        echo "== $t"; date
        timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=long --basetemp=/tmp/pt "tests/test_cuda.py::$t"
    done
    timeout 20 python3 -m pytest -q -p no:cacheprovider --tb=long -m gpu tests/test_device.py
    tar -czf "$OUT/tiny-run.tar.gz" -C /tmp pt 2>/dev/null
    echo "== sampler against HF generate"; date
    timeout 45 python3 scripts/micro.py --device cuda --only sampler --batches 8,64 --rounds 2 --warmup 1 \
        --out "$OUT/micro-sampler.json"
    ;;
*) echo "unknown phase $phase (probe | ablation | packing7b | quick | tests)"; exit 2 ;;
esac
date
