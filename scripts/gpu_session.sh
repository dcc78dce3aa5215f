#!/usr/bin/env bash
# Every GPU measurement rlbench needs, in one bounded command for a machine with one NVIDIA GPU, torch
# (CUDA) and no network, run from the repository root. GPU time comes in short windows, so the command
# is prepared and rehearsed: `headline --dry` runs the same steps at tiny shapes on the CPU, and is a
# test (tests/e2e/test_gpu_session.py).
#
#   bash scripts/gpu_session.sh headline         # one H100/H200, at most ~9 minutes
#   bash scripts/gpu_session.sh headline --dry   # the same steps on the CPU at tiny shapes (~2 minutes)
#   bash scripts/gpu_session.sh headline --only decode,ablation-async   # some steps again (names below)
#
# Steps, in order, each bounded by its own limit and by what is left of the whole budget
# (HEADLINE_SECONDS, default 470), so that one that fails or runs out of time leaves the others' results;
# a dry run multiplies each step's limit by HEADLINE_SCALE (default 3: a CPU is slower than the GPU):
#   env             rlbench env: peak bf16 matmul and copy bandwidth                    -> env.json
#   gpu-tests       the GPU tests (-m "gpu and not e2e"), one line each, tracebacks      -> log.txt
#   gpu-run         the GPU tests' whole tiny run (-m "gpu and e2e": three cells on the GPU) -> log.txt
#   decode          the built-in sampler (eager, CUDA graphs, compiled in the graphs) against HF generate at 1/8/64:
#                   tok/s, step time against the bandwidth floor, operators per step   -> micro-decode.json
#   shared-prompt   each packed layout's train step and forward against unpacked, peak memory, auto's
#                   choice, at the 0.5B shape (P=512 and P=2048) and 4 Qwen2.5-7B layers -> micro-packing.json
#   refpass         the no-grad log-prob pass of the 0.5B shape with its weights requiring grad (the policy's
#                   old_logprob) and frozen (the reference's), unpacked and dense: is the policy/reference gap
#                   of the runs the model's own work                   -> the table in log.txt, runs.tar.gz
#   ablation-async  the 0.5B shape --ablation async (sync, barrier, periodic_async), >= 3 measured iterations
#   ablation-1.5b   if >= 240 s are left: the Qwen2.5-1.5B shape, ~1,000-token answers with a long tail,
#                   --ablation async, 4 measured iterations a cell (configs/qwen2.5-1.5b-shape-gpu.yaml);
#                   in a 470 s budget it rarely starts after the steps above: a GPU window's second command,
#                   `headline --only env,ablation-1.5b,trl`, gives it the window (docs/platforms/gpu.md)
#   trl             if >= 180 s are left: TRL's GRPOTrainer beside rlbench's sync on the GPU, at the 0.5B shape
#                   (--ablation trl_on_policy: sync, trl, trl_cb interleaved, 3 measured iterations a cell;
#                   responses to EOS or the 384-token cap, as TRL generates; every cell eager); needs TRL and
#                   datasets, carried as wheels (scripts/gpu_wheels.sh)
#   profile         if time is left: one sync cell with --profile, the training stages of one iteration:
#                   the trainer's operators by device time and by host time (traces/<worker>.ops.txt in
#                   its run folder; no trace is written)
#   ablation-shared_prompt, ablation-tri_model   if time is left, at the same shape
#   token-budget    (run after ablation-async, before profile, if time is left) one sync cell with
#                   train.micro_batch_tokens (the batch packed without padding, across groups) and
#                   engine.compile=all: compile counts and seconds in its results.json (lifecycle)
# Everything goes to ${OUT:-gpu-out}/, at most 8 files: log.txt, steps.tsv (each step's exit status and
# seconds), env.json, micro-decode.json, micro-packing.json, dmon.txt (nvidia-smi dmon during the run steps),
# runs.tar.gz (every run folder, traces left out).
# On the GPU machine pydantic, TRL and their needs travel as wheels in .whl/ (scripts/gpu_wheels.sh makes it;
# it is git-ignored: copy it with the checkout; docs/platforms/gpu.md).
set -uo pipefail
STEPS="env gpu-tests gpu-run decode shared-prompt refpass ablation-async ablation-1.5b trl token-budget profile ablation-shared_prompt ablation-tri_model"
usage() {
    echo "usage: bash scripts/gpu_session.sh headline [--dry] [--only STEP,...]   (steps: ${STEPS// /, })" >&2
    exit 2
}
[ "${1:-}" = headline ] || usage
shift
dry=0 only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry) dry=1 ;;
        --only) [ $# -ge 2 ] || usage; only=",$2,"; shift ;;
        *) usage ;;
    esac
    shift
done
for name in ${only//,/ }; do
    [[ " $STEPS " == *" $name "* ]] || usage
done
wanted() {  # wanted NAME: whether --only names the step (every step without --only)
    [ -z "$only" ] || [[ "$only" == *",$1,"* ]]
}
OUT=${OUT:-gpu-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=$((SECONDS + ${HEADLINE_SECONDS:-470}))
RUNS=$(mktemp -d)

if [ "$dry" = 0 ]; then
    if [ -d .whl ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl || exit 1
        export PYTHONPATH=/tmp/site
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
fi
"$PY" -c "from importlib.metadata import version as v, PackageNotFoundError as Missing
def of(name):
    try:
        return v(name)
    except Missing:
        return 'missing'
print(*[f'{n} {of(n)}' for n in ('torch', 'transformers', 'accelerate', 'trl', 'datasets', 'pyarrow', 'pydantic')])"
git rev-parse HEAD 2>/dev/null && git status --short | head -20

if [ "$dry" = 1 ]; then     # the same steps, tiny: the CPU, fp32, the 2-layer shape, the tiny run config
    DEV=cpu DTYPE=float32 SHAPE=configs/models/tiny-shape.json
    RUN=(--config configs/cpu-tiny.yaml)
    DECODE=(--batches 1,8 --new-tokens 8 --prompt-len 16)
    PACKING=(--P 32 --R 8 --G 4)
    REFPASS=(--P 16 --R 8 --G 2 --dtype float32)
    ROUNDS=(--rounds 1 --warmup 0)   # the benchmarks run; their numbers are not the point
    MORE=(--set run.iterations=1 --set run.warmup_iterations=0)   # step f: one iteration a cell
    MEASURED=(--set run.iterations=4 --set run.warmup_iterations=1)   # >= 3 measured iterations a cell
    BUDGET=(--set train.micro_batch_tokens=300)   # >= the longest prompt (96) + max_new_tokens (32)
    # step ablation-1.5b's keys at the tiny shape: few-shot prompts (up to 210 tokens), log-normal lengths,
    # token-budget micro-batches
    BIG=(--config configs/cpu-tiny.yaml --set data.few_shot=1 --set rollout.response_length=lognormal
         --set rollout.response_length_mean=16 --set train.micro_batch_tokens=600 --set run.iterations=3
         --set run.warmup_iterations=1)
    PEER=(--set run.iterations=2 --set run.warmup_iterations=1)   # step trl: one measured iteration a cell
else
    DEV=cuda DTYPE=bfloat16 SHAPE=configs/models/qwen2.5-0.5b.json
    RUN=(--config configs/qwen2.5-0.5b-shape-gpu.yaml --set rollout.backend=builtin)
    DECODE=(--batches 1,8,64 --new-tokens 64 --prompt-len 64)
    PACKING=(--shapes 0.5b-p512,0.5b-p2048,7b-layer)   # the 0.5B shape's two prompt lengths, a 7B layer
    REFPASS=(--P 128 --R 384 --G 8 --dtype bfloat16)   # a group of the 0.5B config's longest responses
    ROUNDS=(--rounds 2 --warmup 1)
    MORE=(--set run.iterations=4 --set run.warmup_iterations=1)
    # 4 measured iterations a cell after two warm-up ones: the first GPU run's second iteration was still
    # slow in every cell (its longer prompts grew the decode cache, and the CUDA graphs were captured again),
    # and with 3 one noisy iteration set the interval
    MEASURED=(--set run.iterations=6 --set run.warmup_iterations=2)
    BUDGET=(--set train.micro_batch_tokens=4096)   # ~16 responses of the 64 a stream (8 a group before)
    BIG=(--config configs/qwen2.5-1.5b-shape-gpu.yaml)   # 4 measured iterations a cell after 1 warm-up
    # TRL's generation ends at EOS or the cap (a random model's: the cap, 384 tokens, for every cell alike)
    PEER=(--set run.iterations=4 --set run.warmup_iterations=1)
fi
RUN+=(--no-progress --out "$RUNS")

# A dry run checks that the steps work, on a CPU slower than the GPU; its test gives them as long as they
# need (HEADLINE_SCALE): on a CPU shared with other work a step takes several times its quiet time.
SCALE=$([ "$dry" = 1 ] && echo "${HEADLINE_SCALE:-3}" || echo 1)
step() {  # step NAME SECONDS CMD...: CMD bounded by SECONDS and by what is left; skipped under 10 s
    local name=$1 want=$(($2 * SCALE)) left=$((DEADLINE - SECONDS)) t0=$SECONDS rc
    shift 2
    wanted "$name" || return 0
    local limit=$((want < left ? want : left))
    if [ "$limit" -lt 10 ]; then
        echo "== $name: skipped (${left}s of the budget left)"
        printf '%s\tskipped\t0\n' "$name" >> "$OUT/steps.tsv"
        return
    fi
    echo "== $name (at most ${limit}s) $(date -u +%T)"
    timeout -k 10 "$limit" "$@"
    rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0))s"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$OUT/steps.tsv"
}
if_time() {  # if_time SECONDS: whether at least SECONDS of the budget are left
    [ $((DEADLINE - SECONDS)) -ge "$1" ]
}

step env 45 sh -c "rlbench env --dtype $([ $DEV = cuda ] && echo bfloat16 || echo float32) --remeasure \
    > '$OUT/env.json' && cat '$OUT/env.json'"
GPU_TESTS=(tests/unit/engines/test_cuda.py tests/unit/core/test_device.py tests/unit/engines/test_decode_step.py
           tests/unit/engines/test_vllm_backend.py tests/unit/core/test_busy.py tests/unit/engines/test_chosen_logprobs.py)
# --show-capture=no: the flex layout's compile logs tens of thousands of DEBUG lines per test
PYTEST=("$PY" -m pytest -q -rA --tb=short --show-capture=no -p no:cacheprovider)
# compiled == eager, token-budget streams
GPU_TESTS+=(tests/unit/engines/test_compile.py tests/unit/engines/test_token_budget.py)
step gpu-tests 60 "${PYTEST[@]}" -m "gpu and not e2e" --junitxml "$OUT/gpu-tests.xml" "${GPU_TESTS[@]}"
step gpu-run 90 "${PYTEST[@]}" -m "gpu and e2e" "${GPU_TESTS[@]}"
step decode 120 "$PY" scripts/micro.py --device "$DEV" --dtype "$DTYPE" --model "$SHAPE" --only sampler \
    "${DECODE[@]}" "${ROUNDS[@]}" --out "$OUT/micro-decode.json"
step shared-prompt 100 "$PY" scripts/micro.py --device "$DEV" --dtype "$DTYPE" --model "$SHAPE" \
    --only packing,equivalence "${PACKING[@]}" "${ROUNDS[@]}" --out "$OUT/micro-packing.json"
step refpass 45 "$PY" scripts/micro_refpass.py --device "$DEV" --model "$SHAPE" "${REFPASS[@]}" \
    --out "$RUNS/micro-refpass.json"
# Where the decode benchmark could not capture or replay the CUDA graphs, the runs decode eagerly rather
# than fail every cell (the failure is in micro-decode.json and the log)
if "$PY" -c "import json, sys; r = json.load(open(sys.argv[1])).get('sampler', [])
sys.exit(0 if any('error' in b.get('builtin_graphs', {}) for b in r) else 1)" "$OUT/micro-decode.json" 2>/dev/null; then
    echo "== the CUDA graphs failed in the decode benchmark: the runs set rollout.cuda_graphs=false"
    RUN+=(--set rollout.cuda_graphs=false)
fi
# Likewise where the compiled sampler failed there, or compiled == eager failed in the GPU tests (the
# trainer's passes and the sampler, tests/unit/engines/test_compile.py), the runs are eager (engine.compile=off) rather
# than fail
if [ "$DEV" = cuda ] && "$PY" -c "import json, sys; r = json.load(open(sys.argv[1])).get('sampler', [])
sys.exit(0 if any('error' in b.get('builtin_compiled', {}) for b in r) else 1)" "$OUT/micro-decode.json" 2>/dev/null; then
    echo "== the compiled sampler failed in the decode benchmark: the runs set engine.compile=off"
    RUN+=(--set engine.compile=off)
elif [ "$DEV" = cuda ] && "$PY" -c "import sys, xml.etree.ElementTree as ET
cases = ET.parse(sys.argv[1]).getroot().iter('testcase')
sys.exit(0 if any(c.get('name', '').startswith('test_compiled_equals_eager_on_cuda')
                  and (c.find('failure') is not None or c.find('error') is not None) for c in cases) else 1)" \
        "$OUT/gpu-tests.xml" 2>/dev/null; then
    echo "== compiled == eager failed in the GPU tests: the runs set engine.compile=off"
    RUN+=(--set engine.compile=off)
fi
runs() {  # whether any run step is asked for
    local name
    for name in ablation-async ablation-1.5b trl token-budget profile ablation-shared_prompt ablation-tri_model; do
        wanted "$name" && return 0
    done
    return 1
}
# Workers on a GPU are forked from a server that imported torch and transformers and asked how many devices
# there are (core/devices/starting.py): where a process forked so cannot use CUDA, the runs spawn
if [ "$DEV" = cuda ] && runs && ! timeout 120 "$PY" -c "import os, torch, transformers.modeling_utils
from rlbench.core.devices import device
device.resolve('cuda'), device.available('cuda')
pid = os.fork()
if pid == 0:
    os._exit(0 if torch.ones(1, device='cuda').item() == 1 else 1)
os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))"; then
    echo "== a process forked after the device checks could not use CUDA: the runs set RLBENCH_START=spawn"
    export RLBENCH_START=spawn
fi
if [ "$DEV" = cuda ] && runs; then
    nvidia-smi dmon -s ut -d 1 > "$OUT/dmon.txt" 2>&1 &
    dmon=$!
fi
step ablation-async 300 rlbench run "${RUN[@]}" "${MEASURED[@]}" --ablation async --set run.name=headline-async
# The regime of the published asynchronous gains: the Qwen2.5-1.5B shape with ~1,000-token answers and a long
# tail (configs/qwen2.5-1.5b-shape-gpu.yaml), started only with time left for its 3 cells (RUN begins with
# --config FILE: BIG's config replaces it, the rest, fallbacks included, applies)
if ! wanted ablation-1.5b; then
    :
elif if_time $((dry ? 60 : 240)); then
    step ablation-1.5b 330 rlbench run "${BIG[@]}" "${RUN[@]:2}" --ablation async --set run.name=headline-1.5b
else
    echo "== ablation-1.5b: not started ($((DEADLINE - SECONDS))s left)"
    printf '%s\tnot started\t0\n' ablation-1.5b >> "$OUT/steps.tsv"
fi
# TRL beside rlbench's sync on the same GPU (the peer ablation sets every cell eager: TRL does not compile);
# not started where TRL or datasets does not import (e.g. a pyarrow older than datasets' pa.json_, 19)
if ! wanted trl; then
    :
elif ! why=$("$PY" -c "import trl, datasets" 2>&1); then
    echo "== trl: not started (TRL or datasets does not import here: $(echo "$why" | tail -1))"
    printf '%s\tnot started\t0\n' trl >> "$OUT/steps.tsv"
elif if_time $((dry ? 60 : 180)); then
    step trl 300 rlbench run "${RUN[@]}" "${PEER[@]}" --ablation trl_on_policy --set rollout.response_length=eos \
        --set run.name=headline-trl
else
    echo "== trl: not started ($((DEADLINE - SECONDS))s left)"
    printf '%s\tnot started\t0\n' trl >> "$OUT/steps.tsv"
fi
# train.micro_batch_tokens and compile on (the CUDA default, set here so that the dry run compiles too)
if ! wanted token-budget; then
    :
elif if_time $((90 * SCALE)); then
    step token-budget 150 rlbench run "${RUN[@]}" "${MORE[@]}" --ablation none "${BUDGET[@]}" \
        --set engine.compile=all --set engine.schedule=sync --set run.name=headline-budget
else
    echo "== token-budget: not started ($((DEADLINE - SECONDS))s left)"
    printf '%s\tnot started\t0\n' token-budget >> "$OUT/steps.tsv"
fi
if ! wanted profile; then
    :
elif if_time $((120 * SCALE)); then
    # a short window: the training stages of one iteration after one warm-up (which captures the CUDA graphs;
    # RLBENCH_PROFILE_WINDOW=train: from its first log-prob pass to its optimizer step, no rollout), the
    # operator tables only (RLBENCH_PROFILE_TRACE=0: no trace); on 2026-11-28 three whole iterations and the
    # trace ran past 90 s
    step profile 150 env RLBENCH_PROFILE_TRACE=0 RLBENCH_PROFILE_WINDOW=train rlbench run "${RUN[@]}" --ablation none --profile \
        --set engine.schedule=sync --set run.iterations=2 --set run.warmup_iterations=1 \
        --set run.profile_iterations=1 --set run.name=headline-profile
else
    echo "== profile: not started ($((DEADLINE - SECONDS))s left)"
    printf '%s\tnot started\t0\n' profile >> "$OUT/steps.tsv"
fi
for abl in shared_prompt tri_model; do
    if ! wanted "ablation-$abl"; then
        continue
    elif if_time $((150 * SCALE)); then
        step "ablation-$abl" 210 rlbench run "${RUN[@]}" "${MORE[@]}" --ablation "$abl" --set run.name="headline-$abl"
    else
        echo "== ablation-$abl: not started ($((DEADLINE - SECONDS))s left)"
        printf '%s\tnot started\t0\n' "ablation-$abl" >> "$OUT/steps.tsv"
    fi
done
[ -n "${dmon:-}" ] && kill "$dmon" 2>/dev/null
# the traces (tens of MB) and a cut run's weight file (.weights, ~1 GB at the 0.5B shape) would keep the
# archive from coming back
tar --exclude='*.pt.trace.json*' --exclude=.weights -czf "$OUT/runs.tar.gz" -C "$RUNS" . && rm -rf "$RUNS"
echo "== done $(date -u +%T), ${SECONDS}s"
