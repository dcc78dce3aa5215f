#!/usr/bin/env bash
# Re-measure bench/baselines/cpu-default.json and the sensitivity of `rlbench check` on this machine:
# N unchanged CI runs (configs/ci-bench.yaml, what scripts/ci_bench.sh runs), then one run per planted
# slowdown given (RLBENCH_SLOW specs, bench/planted/slowdown.py), then the study and the calibrated baseline.
#   bash scripts/check_calibrate.sh OUT_DIR N [SPEC ...]
#   e.g. bash scripts/check_calibrate.sh /tmp/cal 6 update:0.10@periodic_async packing:0.10 queue:0.10@periodic_async
# Each run is ~3 minutes on 2 cores; on a shared machine wrap heavy jobs in a lock (flock) so they
# do not overlap. Runs already in OUT_DIR are kept and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$1; N=$2; shift 2
mkdir -p "$OUT"
run() {  # run NAME [SPEC]
  [ -n "$(ls -d "$OUT/$1"/*/ 2>/dev/null)" ] && return
  RLBENCH_SLOW="${2:-}" .venv/bin/rlbench run --config configs/ci-bench.yaml --ablation ci --out "$OUT/$1" \
    --no-progress --no-report > "$OUT/$1.log" 2>&1
}
for i in $(seq 1 "$N"); do run "unchanged-$i"; done
for spec in "$@"; do run "planted-${spec//[^A-Za-z0-9.]/_}" "$spec"; done
UNCHANGED=$(ls -d "$OUT"/unchanged-*/*/)
.venv/bin/rlbench check $(ls -d "$OUT"/*/*/) --calibrate
.venv/bin/rlbench check $UNCHANGED --update --baseline bench/baselines/cpu-default.json
