#!/usr/bin/env bash
# CI performance gate: `rlbench check --against accepted` runs the accepted commit (bench/baselines/ACCEPTED)
# and this tree on this machine, interleaved iteration by iteration, and judges every metric new / old against
# the run's own noise. Exit 1 on a regression (TPSPD of a cell, a stage's CPU cost per unit of work, a
# between-cell ratio, start-up, evaluation time, peak memory and CPU of every process, accuracy, an invariant)
# or on a drift (a change point of a metric's chained series over the history of accepted results, among its
# last steps), 2 when the accepted commit is not in this clone, not an ancestor of HEAD, takes turns by another
# ring protocol or cannot run. What it detects: bench/baselines/README.md.
#
# Tiers (bench/check/tiers.py): the main workload (configs/ci-ab.yaml, the ci ablation's four cells) always;
# the schedules tier (configs/ci-schedules.yaml, the families ladder: every registered schedule and partial
# rollout) only when the code only those cells run changed since the accepted commit.
#
# History: each passing A/B is recorded into RLBENCH_HISTORY (a file a CI keeps between runs), else into a
# copy of the repository's bench/baselines/history.jsonl in the output folder, so the drift is judged on the
# committed history plus this tree's step without touching the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rlbench-ci.XXXXXX")
HISTORY=${RLBENCH_HISTORY:-$OUT/history.jsonl}
if [ -z "${RLBENCH_HISTORY:-}" ] && [ -f bench/baselines/history.jsonl ]; then
    cp bench/baselines/history.jsonl "$HISTORY"
fi
START=$SECONDS
TIERS=$(.venv/bin/python -m rlbench.check.tiers accepted)
while read -r name ablation config; do
    T0=$SECONDS
    .venv/bin/rlbench check --against accepted --ablation "$ablation" --config "$config" --out "$OUT" \
        --record "$HISTORY"
    echo "ci_bench: tier $name took $((SECONDS - T0)) s"
done <<< "$TIERS"
echo "ci_bench: A/B benchmark and check took $((SECONDS - START)) s (history: $HISTORY)"
