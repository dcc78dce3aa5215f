#!/usr/bin/env bash
# The measured power of `rlbench check --against` (bench/baselines/README.md): N rounds, each an unchanged A/B
# run of this tree against its own commit, then one A/B run per planted slowdown (RLBENCH_SLOW, new tree only),
# so that the settings share the machine's slow and busy hours alike. Every run is judged alone
# (--no-confirm): the study pairs the runs itself to measure the confirming run.
# Usage: bash scripts/ab_calibrate.sh OUT N [SPEC ...]   e.g. ... /tmp/abcal 10 work:0.10@+tri_model
# Then: rlbench check --calibrate OUT/*/*/
# Run it from a clean checkout of the commit under study (the new side is the tree rlbench imports).
# AB="--env-a .venv/bin/python" measures the A/B of two environments instead (here the same one on both
# sides; the planted slowdowns reach B only). LOCK=FILE runs each A/B under `flock FILE`, so that other heavy
# work on a shared machine takes its turns between them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$1; N=$2; shift 2
RB=${RLBENCH:-.venv/bin/rlbench}
mkdir -p "$OUT"
one() {  # NAME [ENV=VALUE]: one A/B run into OUT/NAME
    local name=$1 start=$SECONDS
    shift
    ${LOCK:+flock "$LOCK"} env "$@" $RB check ${AB:---against HEAD} --no-confirm --out "$OUT/$name" \
        > "$OUT/$name.txt" 2>&1
    echo "$name exit $? in $((SECONDS - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg): $(grep -m1 -E '^(PASS|FAIL)' "$OUT/$name.txt")"
}
for i in $(seq 1 "$N"); do
    one "unchanged-$i"
    for spec in "$@"; do
        one "planted-${spec//[:@,+]/_}-$i" "RLBENCH_SLOW=$spec"
    done
done
