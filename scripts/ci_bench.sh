#!/usr/bin/env bash
# CI performance check: a short `--ablation all` on the CPU default, checked against the committed
# baseline. Exit 1 when a ratio (async speedup, tri-model / shared-prompt gain) or accuracy regressed.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rlbench-ci.XXXXXX")
.venv/bin/rlbench run --config configs/ci-bench.yaml --ablation all --out "$OUT" --no-progress
RUN=$(ls -d "$OUT"/*/ | head -1)
.venv/bin/rlbench check "$RUN" --baseline bench/baselines/cpu-default.json
