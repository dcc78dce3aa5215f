#!/usr/bin/env bash
# CI performance check: `--ablation ci` on the CPU default with its cells interleaved (configs/ci-bench.yaml),
# checked against the committed, calibrated baseline. Exit 1 when a compared component regressed (a
# speedup or gain, the async update, packing, the queue path, weight sync), accuracy fell, or sync and
# periodic-async stopped reaching the same accuracy. What it detects: bench/baselines/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rlbench-ci.XXXXXX")
START=$SECONDS
.venv/bin/rlbench run --config configs/ci-bench.yaml --ablation ci --out "$OUT" --no-progress --no-report
RUN=$(ls -d "$OUT"/*/ | head -1)
.venv/bin/rlbench check "$RUN" --baseline bench/baselines/cpu-default.json
echo "ci_bench: benchmark and check took $((SECONDS - START)) s"
