"""What the columns and the verdict's words mean, said once: report.html prints it under its tables
and `rlbench run --help` / `rlbench report --help` end with it (import-light: no pandas). The
terminal's default output leaves it out; `--wide` keeps its one-line note."""
from __future__ import annotations

VERDICT = ("wins / loses: periodic-async's TPSPD above / below its sync cell's on the same "
           "devices, said only where the 95% interval of the ratio (from the per-iteration ratios, "
           "or from the seeds' ratios) lies wholly above / below 1; even: the interval includes 1; "
           "too few iterations: fewer paired iterations than hold the interval's level (fewer than "
           "4, or a short series that looks strongly correlated). The ratio printed with an "
           "interval is its centre: the typical per-iteration ratio (exp of the 20%-trimmed mean "
           "of the log-ratios), which can differ from the summary's speedup column (the ratio of "
           "medians) where some iterations stalled. Device split: the barrier cell "
           "(periodic-async's pools, training only after the last group) over sync; overlap: "
           "periodic-async over the barrier; the speedup is their product.")
COLUMNS = {
    "TPSPD median (min–max)": "tokens per second per device: prompt + response tokens of the "
                              "trained samples / (iteration wall time × all devices), median and "
                              "range over the measured iterations",
    "speedup": "median TPSPD over the reference cell's (the first cell of its workload)",
    "measured speedup": "(the speedup table, the verdict) the typical per-iteration TPSPD ratio "
                        "over the reference, exp of the 20%-trimmed mean of the paired log-ratios: "
                        "the centre of the 95% interval printed with it (the ratio of medians "
                        "where there is no interval)",
    "predicted": "the speedup predicted from the sync cell's measured device costs (decode steps "
                 "by their batch bucket and cache window, training, optimizer step, weight sync), "
                 "replayed on the cell's layout step by step; by the estimator of the measured "
                 "speedup it stands beside (here the ratio of medians, as the speedup column; in "
                 "the verdict each iteration paired with the reference's)",
    "rollout %": "share of a sync iteration spent generating",
    "acc before→after": "greedy pass@1 on the eval problems with GSM8K's strict rule, before and "
                        "after training",
    "status": "complete, or how the cell ended (failed, interrupted)",
    "rollout tok/s": "generated tokens per second; train tok/s: trained tokens per second",
    "weight sync s/iter": "seconds per iteration moving the trainer's weights into the rollout "
                          "engines, summed over workers (the rollout backend in brackets)",
    "host CPU % of a core": "the driver's CPU seconds over the iteration's wall time",
    "idle % per worker": "share of the iteration wall time a worker ran no work stage",
    "busy % per stage": "each stage's device busy time over its wall time: GPU (a kernel running, "
                        "NVML's samples) on CUDA, CPU (the worker thread's CPU seconds) on CPU",
    "####-format %": "share of eval answers the strict rule can read (the rest score 0 whatever "
                     "their number; summary.csv also has pass@1 in any format)",
    "max stale": "largest trained − behaviour weight version of a trained sample",
    "stage_<name>_s": "(summary.csv) mean seconds per measured iteration in that stage, summed "
                      "over workers",
    "busy_<stage>_pct": "(summary.csv) that stage's device busy seconds over its wall seconds, "
                        "measured iterations, summed over workers; busy_clock says whose (GPU or "
                        "CPU)",
}
TERMINAL_NOTE = ("rollout %: share of a sync iteration spent generating; predicted: from the sync "
                 "cell's measured device costs (core/costmodel/predict.py).")


def definitions() -> list[str]:
    """'name: meaning' per column, then the verdict's words."""
    return [f"{name}: {meaning}." for name, meaning in COLUMNS.items()] + [VERDICT]


def help_epilog() -> str:
    """The definitions as the end of a command's --help (one paragraph each)."""
    return "What the table and the verdict say:\n\n" + "\n\n".join(definitions())
