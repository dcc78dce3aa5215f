#!/usr/bin/env bash
# CI performance gate: `rlbench check --against accepted` runs the accepted commit (bench/baselines/ACCEPTED)
# and this tree on this machine, interleaved iteration by iteration (configs/ci-ab.yaml: the ci ablation's
# four cells), and judges every metric new / old against the run's own noise. Exit 1 on a regression
# (TPSPD of a cell, a stage's CPU cost per unit of work, a between-cell ratio, start-up, evaluation time,
# peak memory and CPU of every process, accuracy, an invariant), 2 when the accepted commit is not in this
# clone, not an ancestor of HEAD, takes turns by another ring protocol or cannot run. What it detects:
# bench/baselines/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rlbench-ci.XXXXXX")
START=$SECONDS
.venv/bin/rlbench check --against accepted --out "$OUT"
echo "ci_bench: A/B benchmark and check took $((SECONDS - START)) s"
