#!/usr/bin/env bash
# The measured power of `rlbench check --against` (bench/baselines/README.md): N unchanged A/B runs of
# this tree against its own commit, then one A/B run per planted slowdown (RLBENCH_SLOW, new tree only).
# Usage: bash scripts/ab_calibrate.sh OUT N [SPEC ...]     e.g. ... /tmp/abcal 20 decode:0.10 optimizer_step:0.10
# Then: rlbench check --calibrate OUT/*/*/
# Run it from a clean checkout of the commit under study (the new side is the tree rlbench imports).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$1; N=$2; shift 2
RB=${RLBENCH:-.venv/bin/rlbench}
mkdir -p "$OUT"
for spec in "$@"; do
    name=planted-${spec//[:@,]/_}
    START=$SECONDS
    RLBENCH_SLOW=$spec $RB check --against HEAD --out "$OUT/$name" > "$OUT/$name.txt" 2>&1
    echo "$name exit $? in $((SECONDS - START)) s: $(tail -n +1 "$OUT/$name.txt" | grep -m1 -E '^(PASS|FAIL)')"
done
for i in $(seq 1 "$N"); do
    START=$SECONDS
    $RB check --against HEAD --out "$OUT/unchanged-$i" > "$OUT/unchanged-$i.txt" 2>&1
    echo "unchanged-$i exit $? in $((SECONDS - START)) s: $(grep -m1 -E '^(PASS|FAIL)' "$OUT/unchanged-$i.txt")"
done
