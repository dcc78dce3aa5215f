#!/usr/bin/env bash
# The prediction panel: measured against predicted speedup per cell, each workload run several times, so
# both the error per cell and the run-to-run spread show. Workloads: the CPU default (5 runs: the reruns
# check), the regime map's eight points (--ablation regime) and three long-tail workloads (lognormal
# lengths, sigma >= 1.2, a small and a large batch). Every run holds /tmp/rlbench-heavy.lock, so heavy runs
# never overlap; rerunning the script resumes (a run with its summary.md is kept).
#
#   bash scripts/panel.sh [OUT] [RUNS] [WORKLOAD ...]   # OUT: /tmp/rlbench-panel; RUNS: 3 (the default: 5)
#
# Writes OUT/panel.csv (workload, run, cell, measured, by shape, by sequences in flight, errors: from
# scripts/rollout_model_check.py) and OUT/reruns.txt (`rlbench compare` of each workload's runs: every
# cell's verdict per run and whether the runs agree within their intervals), and prints their summary.
# Heavy, on 2 cores: about a minute per default run, two per long-tail run, 13 per regime map run
# (about 1 h 10 min in all).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rlbench-panel}
RUNS=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
RLBENCH=${RLBENCH:-.venv/bin/rlbench}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"

LONG="--set rollout.response_length=lognormal --set rollout.max_new_tokens=192"
declare -A WORKLOADS=(
  [default]=""
  [regime]="--ablation regime"
  [longtail-s1.5-small]="$LONG --set rollout.response_length_sigma=1.5 --set train.prompts_per_iteration=4"
  [longtail-s1.5-large]="$LONG --set rollout.response_length_sigma=1.5 --set train.prompts_per_iteration=16"
  [longtail-s1.2-large]="$LONG --set rollout.response_length_sigma=1.2 --set train.prompts_per_iteration=16"
)
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(default regime longtail-s1.5-small longtail-s1.5-large longtail-s1.2-large)

for name in "${NAMES[@]}"; do
  [ -n "${WORKLOADS[$name]+x}" ] || { echo "panel: no workload $name (allowed: ${!WORKLOADS[*]})" >&2; exit 2; }
  runs=$RUNS
  if [ "$name" = default ] && [ "$runs" -lt 5 ]; then runs=5; fi  # the reruns check: >= 5 of one config
  for run in $(seq 1 "$runs"); do
    dir="$OUT/$name/run$run"
    if ls "$dir"/*/summary.md >/dev/null 2>&1; then continue; fi
    rm -rf "$dir" && mkdir -p "$dir"  # an unfinished run is measured again
    # shellcheck disable=SC2086  # the workload's options are words
    flock /tmp/rlbench-heavy.lock "$RLBENCH" run ${WORKLOADS[$name]} --out "$dir" > "$dir/log.txt" 2>&1 \
      || echo "panel: $name run $run failed (see $dir/log.txt)" >&2
  done
done

: > "$OUT/reruns.txt"
dirs=()
for name in "${!WORKLOADS[@]}"; do
  mapfile -t found < <(ls -d "$OUT/$name"/run*/*/ 2>/dev/null | while read -r d; do
    [ -f "$d/summary.md" ] && echo "$d"; done)
  [ ${#found[@]} -gt 0 ] || continue
  dirs+=("${found[@]}")
  if [ ${#found[@]} -ge 2 ]; then
    { echo "## $name"; "$RLBENCH" compare "${found[@]}" | sed -n '/^Verdicts across/,$p'; echo; } >> "$OUT/reruns.txt"
  fi
done
"$PY" scripts/rollout_model_check.py --markdown --csv "$OUT/panel.csv" "${dirs[@]}" | sed -n '/^the model:/,$p'
grep -E "^## |every run says|the runs say|differ" "$OUT/reruns.txt" || true
