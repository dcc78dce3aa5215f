#!/usr/bin/env bash
# The prediction panel: measured against predicted speedup per cell, each workload run three times, so
# both the error per cell and the run-to-run spread show. Workloads: the CPU default, the regime map's
# toy points (--ablation regime-quick) and three long-tail workloads (lognormal lengths, sigma >= 1.2,
# a small and a large batch). Every run holds /tmp/rlbench-heavy.lock, so heavy runs never overlap.
#
#   bash scripts/panel.sh [OUT] [RUNS]     # OUT defaults to /tmp/rlbench-panel, RUNS to 3 (the default: 5)
#
# Writes OUT/panel.csv (workload, run, cell, measured, predicted, error) and prints it with the
# median |error| and, per cell, the spread of the measured speedup across runs (max / min).
# Heavy: about a minute per default run and ~5 min per regime-quick run on 2 cores (about 40 minutes in all).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rlbench-panel}
RUNS=${2:-3}
RLBENCH=${RLBENCH:-.venv/bin/rlbench}
mkdir -p "$OUT"

LONG="--set rollout.response_length=lognormal --set rollout.max_new_tokens=192"
declare -A WORKLOADS=(
  [default]=""
  [regime-quick]="--ablation regime-quick"
  [longtail-s1.5-small]="$LONG --set rollout.response_length_sigma=1.5 --set train.prompts_per_iteration=4"
  [longtail-s1.5-large]="$LONG --set rollout.response_length_sigma=1.5 --set train.prompts_per_iteration=16"
  [longtail-s1.2-large]="$LONG --set rollout.response_length_sigma=1.2 --set train.prompts_per_iteration=16"
)

for name in default regime-quick longtail-s1.5-small longtail-s1.5-large longtail-s1.2-large; do
  runs=$RUNS
  if [ "$name" = default ] && [ "$runs" -lt 5 ]; then runs=5; fi  # the run-to-run spread: >= 5 of one config
  for run in $(seq 1 "$runs"); do
    dir="$OUT/$name/run$run"
    if ls "$dir"/*/summary.md >/dev/null 2>&1; then continue; fi  # rerunning the script resumes
    mkdir -p "$dir"
    # shellcheck disable=SC2086  # the workload's options are words
    flock /tmp/rlbench-heavy.lock "$RLBENCH" run ${WORKLOADS[$name]} --out "$dir" > "$dir/log.txt" 2>&1 \
      || echo "panel: $name run $run failed (see $dir/log.txt)" >&2
  done
done

.venv/bin/python - "$OUT" <<'EOF'
import csv, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = []
# Each run's summary.md "Measured vs predicted" table: the verdict's paired speedup and the prediction.
for summary in sorted(out.glob("*/run*/*/summary.md")):
    workload, run = summary.parts[-4], summary.parts[-3]
    table = summary.read_text().split("## Measured vs predicted", 1)[-1].split("\n## ", 1)[0]
    for line in table.splitlines()[4:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        try:
            m, p = float(cells[3].rstrip("×")), float(cells[4].rstrip("×"))
        except (IndexError, ValueError):
            continue  # a row without both numbers
        r = {"cell": cells[0]}
        rows.append({"workload": workload, "run": run, "cell": r["cell"], "measured": f"{m:.3f}",
                     "predicted": f"{p:.3f}", "error": f"{(p - m) / m:+.1%}"})
with (out / "panel.csv").open("w", newline="") as f:
    w = csv.DictWriter(f, ["workload", "run", "cell", "measured", "predicted", "error"])
    w.writeheader()
    w.writerows(rows)
print("| workload | run | cell | measured | predicted | error |\n|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['workload']} | {r['run']} | {r['cell']} | {r['measured']}× | {r['predicted']}× | {r['error']} |")
errors = [abs(float(r["error"].rstrip("%"))) for r in rows]
if errors:
    print(f"\nmedian |error| {statistics.median(errors):.1f}%, largest {max(errors):.1f}%, "
          f"within 10%: {sum(e <= 10 for e in errors)}/{len(errors)}")
by_cell: dict = {}
for r in rows:
    by_cell.setdefault((r["workload"], r["cell"]), []).append(float(r["measured"]))
for (workload, cell), ms in sorted(by_cell.items()):
    if len(ms) > 1:
        print(f"spread {workload} {cell}: {min(ms):.2f}–{max(ms):.2f}× over {len(ms)} runs")
EOF
