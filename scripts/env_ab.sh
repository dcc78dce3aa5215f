#!/usr/bin/env bash
# A CI job's A/B of two environments (docs/ci.md): build the old and the new environment from two lock files,
# run the same workload under both, interleaved on this machine (rlbench check --env-a OLD --env-b NEW), record
# a passing A/B in the history, write the history's page, and exit as the check did: 0 pass, 1 a regression
# (or a drift over the history), 2 bad input.
#
# Usage: bash scripts/env_ab.sh OLD_LOCK NEW_LOCK OUT [rlbench check options ...]
#   OLD_LOCK, NEW_LOCK  requirements files that pin every package (pip freeze, uv pip compile), installed as
#                       they are (--no-deps, as pip-sync does: nothing resolved again, so a package a venv got
#                       with --no-deps freezes into a lock that installs); torch's build comes from the indexes
#                       pip is configured with (a CPU or a CUDA build)
#   OUT                 receives env-old/ and env-new/ (the venvs), ab/ (the A/B folders: ab.json, each side's
#                       run and log), check.txt (the report) and history.html
#   RLBENCH_HISTORY     the history file (default OUT/history.jsonl; a CI keeps it between runs)
#   RLBENCH_SPEC        what installs rlbench into both environments (default: this checkout); installed under
#                       the locked versions as constraints, so it adds what it needs and moves none of them
#   RLBENCH_COMPILE=0   do not compile the environments' bytecode (a faster build; then each side's first run
#                       compiles what it imports, inside its start-up)
#   PYTHON              the interpreter the venvs are made from (default python3)
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: bash scripts/env_ab.sh OLD_LOCK NEW_LOCK OUT [rlbench check options ...]" >&2; exit 2; }
OLD_LOCK=$1; NEW_LOCK=$2; OUT=$3; shift 3
HERE=$(cd "$(dirname "$0")/.." && pwd)
SPEC=${RLBENCH_SPEC:-$HERE}
HISTORY=${RLBENCH_HISTORY:-$OUT/history.jsonl}
for lock in "$OLD_LOCK" "$NEW_LOCK"; do
    [ -f "$lock" ] || { echo "env_ab.sh: lock file $lock not found" >&2; exit 2; }
done
mkdir -p "$OUT"
source "$HERE/scripts/uv_install.sh"  # uv_install VENV ARGS: uv, with pip's indexes and wheel folders

build() {  # LOCK VENV: the lock's packages, then rlbench under them
    local lock=$1 venv=$2
    rm -rf "$venv"
    # rlbench is installed with what the lock put there as constraints, name==version (a lock's lines
    # may be paths or URLs, which uv takes as requirements, not as constraints)
    "${PYTHON:-python3}" -m venv "$venv" &&
        UV_INSTALL_COMPILE=${RLBENCH_COMPILE:-1} uv_install "$venv" --no-deps -r "$lock" &&
        "$venv/bin/python" -m pip list -q --format=freeze --disable-pip-version-check > "$venv/locked.txt" &&
        UV_INSTALL_COMPILE=${RLBENCH_COMPILE:-1} uv_install "$venv" -c "$venv/locked.txt" "$SPEC"
}
for side in old new; do
    lock=$OLD_LOCK; [ "$side" = new ] && lock=$NEW_LOCK
    start=$SECONDS
    build "$lock" "$OUT/env-$side" || { echo "env_ab.sh: building the $side environment from $lock failed" >&2; exit 2; }
    echo "env_ab.sh: $side environment from $lock in $((SECONDS - start)) s" >&2
done
"$OUT/env-new/bin/rlbench" check --env-a "$OUT/env-old/bin/python" --env-b "$OUT/env-new/bin/python" \
    --out "$OUT/ab" --record "$HISTORY" "$@" | tee "$OUT/check.txt"
status=${PIPESTATUS[0]}
if [ -f "$HISTORY" ]; then
    "$OUT/env-new/bin/rlbench" history "$HISTORY" --html "$OUT/history.html" > "$OUT/history.txt" || true
fi
exit "$status"
