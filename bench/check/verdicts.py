"""`rlbench check`: compare a run (or ablation) with a committed baseline; a regression exits 1.

No absolute time is compared (machines differ and are noisy), only what a run measures against
itself, plus accuracy. What is compared: bench/check/metrics.py, each metric family a CHECK row of
core/results/metric_table.py. How: paired per-iteration ratios (speedups, gains, stage costs, the
queue path) are judged by bench/check/stats.py against noise measured on this machine (`rlbench
check --calibrate`); invariants (sync and periodic-async reach the same accuracy) strictly;
cross-machine accuracy loosely, by tolerance; overhead shares by tolerance and a bootstrap. A
failure names the component, its change and the 95% interval.
Format, statistics and measured sensitivity: bench/baselines/README.md.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlbench.check import stats as check_stats
from rlbench.check.baseline import (BOOTSTRAP, DEFAULT_TOLERANCES, load_baseline, parse_tolerances,
                                    write_baseline)
from rlbench.check.metrics import compute_metrics
from rlbench.core.config import RunConfig
from rlbench.core.config_files import RENAMED_KEYS

# The public API of `rlbench check`, baseline-file functions included.
__all__ = ["check", "verdict_of", "format_check", "compute_metrics", "load_baseline",
           "write_baseline", "parse_tolerances",
           "CheckResult", "Row", "MARKS", "DEFAULT_TOLERANCES"]

MARKS = ("better", "worse", "not significant", "not comparable")
CONFIG_SECTIONS = ("model", "data", "rollout", "train", "engine", "run")
# do not change what is measured
IGNORED_KEYS = {"run.name", "engine.queue_timeout_s", "run.logger"}
MIN_SAMPLES = 3  # fewer samples per array: judge on the tolerance alone


# ----------------------------------------------------------------- comparison


@dataclass
class Row:
    metric: str
    kind: str
    baseline: float | str | None
    current: float | str | None
    mark: str
    change: float | None = None  # current / baseline - 1
    delta: float | None = None  # current - baseline
    # 95% interval: of the relative change (ratio, cost), else of delta
    ci: tuple[float, float] | None = None
    note: str = ""
    description: str = ""  # what the metric measures (names the component in a failure)
    # judged on per-iteration log-ratios against this run's noise (A/B; confirmable)
    paired: bool = False
    # paired: the standard error of the mean log-ratio (the history's step variance)
    se: float | None = None


@dataclass
class CheckResult:
    run_dir: str
    baseline_path: str
    rows: list[Row] = field(default_factory=list)
    verdict: str = ""
    # 0 pass, 1 regression, 2 nothing comparable (bad input raises UserError: exit 2)
    exit_code: int = 0
    baseline_info: dict = field(default_factory=dict)  # created, git_commit
    # "key: baseline -> run" behind 'not comparable'
    config_diff: list[str] = field(default_factory=list)


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in (tree or {}).items():
        key = f"{prefix}{k}"
        out.update(_flat(v, f"{key}.") if isinstance(v, dict) else {key: v})
    return out


def _flat_config(tree: dict) -> dict:
    """A resolved config as flat keys, a key renamed since under its name now (results and baselines
    written before the rename keep the old one)."""
    return {RENAMED_KEYS.get(k, k): v for k, v in _flat(tree).items()}


def _config_diff(cells: list[str], base: dict, cur: dict) -> list[str]:
    """Keys that matter and differ between the baseline's and the run's config of these cells.

    Raw dicts, not RunConfig (unlike the analysis, which reads a config back with recorded_config):
    the baseline's side was written by another commit (the accepted one, or the A/B gate's old
    tree), whose keys today's models may refuse (removed, or not yet added); the diff must name such
    a key, not fail."""
    diff = []
    for cell in cells:
        sw = base["config"]["cells"].get(cell)
        now = (cur["cells"].get(cell) or {}).get("config")
        if sw is None or now is None:
            diff.append(f"cell {cell} "
                        f"{'not in the baseline' if sw is None else 'has no config in this run'}")
            continue
        ref = base["config"]["reference"]
        full = (base["config"].get("cell_configs") or {}).get(cell)
        # Baselines written before cell_configs existed: the reference config with the cell's
        # switches.
        was = _flat_config(full or {**ref, "engine": {**(ref.get("engine") or {}), **sw}})
        now = _flat_config(now)
        # A key the baseline predates counts as unchanged while the run leaves it at its default.
        was.update({k: v for k, v in _defaults().items() if k not in was and now.get(k) == v})
        diff += [f"{k}: {was.get(k, '-')} -> {now.get(k, '-')}" for k in sorted(set(was) | set(now))
                 if k.split(".")[0] in CONFIG_SECTIONS and k not in IGNORED_KEYS and was.get(k)
                 != now.get(k)]
    return list(dict.fromkeys(diff))


@functools.lru_cache(maxsize=1)
def _defaults() -> dict:
    """The flat default config (built once; callers only read it)."""
    return _flat(RunConfig().model_dump(mode="json"))


def _bootstrap_delta(b: dict | None, c: dict | None) -> tuple[float, float] | None:
    """95% percentile interval of median(run values) - median(baseline values), or None without
    samples."""
    if (not b or not c or "values" not in b or "values" not in c
            or min(len(b["values"]), len(c["values"])) < MIN_SAMPLES):
        return None
    # per metric: results do not depend on metric order
    rng = np.random.default_rng(BOOTSTRAP["seed"])

    def stat(x) -> np.ndarray:  # [B] bootstrap replicates of the median
        x = np.asarray(x, dtype=float)
        return np.median(x[rng.integers(0, len(x), (BOOTSTRAP["resamples"], len(x)))], axis=1)

    d = stat(c["values"]) - stat(b["values"])
    tail = (1 - BOOTSTRAP["confidence"]) / 2 * 100
    lo, hi = np.percentile(d, [tail, 100 - tail])
    return float(lo), float(hi)


def judge(b: dict, c: dict, stats: dict) -> tuple[str, tuple | None, str]:
    """(mark, interval, note): paired ratios against measured noise, invariants strictly, the rest
    beyond tolerance and beyond noise."""
    if b["kind"] == "invariant":
        tol = b["tolerance"]
        return ("worse" if abs(c["value"]) > tol else "not significant"), None, \
            "invariant: must be 0" + (f" (+-{tol:g})" if tol else "")
    if "log_ratios" in (b.get("samples") or {}) and "log_ratios" in (c.get("samples") or {}):
        return check_stats.verdict(b, c, stats)
    delta = c["value"] - b["value"]
    allowed = max(b["tolerance"] * abs(b["value"]), b.get("abs_tolerance", 0.0))
    ci = _bootstrap_delta(b.get("samples"), c.get("samples"))
    if abs(delta) <= allowed:
        return "not significant", ci, f"within tolerance +-{allowed:.3g}"
    if ci is not None and ci[0] <= 0.0 <= ci[1]:
        return "not significant", ci, f"beyond tolerance +-{allowed:.3g} but within noise"
    bad = delta < 0 if b["direction"] == "higher_is_better" else delta > 0
    return ("worse" if bad else "better"), ci, f"tolerance +-{allowed:.3g}"


def _compare(name: str, base: dict, cur: dict, diffs: dict) -> Row:
    b, c = base["metrics"].get(name), cur["metrics"].get(name)
    row = Row(name, (b or c)["kind"], b and b["value"], c and c["value"], "not comparable",
              description=(b or c).get("description", ""))
    if b is None:
        row.note = "not in the baseline"
        return row
    if c is None:  # lost: a metric the baseline has must not pass unseen
        row.mark, row.note = "worse", "in the baseline, not measured in this run"
        return row
    row.delta = c["value"] - b["value"]
    row.change = c["value"] / b["value"] - 1 if b["value"] else None
    diff = _config_diff(b.get("cells") or c["cells"], base, cur)
    if diff:
        diffs.update(dict.fromkeys(diff))
        row.note = "config differs: " + ", ".join(dict.fromkeys(d.split(":")[0] for d in diff))
        return row
    row.mark, row.ci, row.note = judge(b, c,
                                       {**check_stats.DEFAULTS, **(base.get("statistics") or {})})
    return row


def check(run_dir: Path, baseline_path: Path) -> CheckResult:
    """Compare a run with a baseline. exit_code 1 when any metric is 'worse' or a cell did not
    complete."""
    base = load_baseline(baseline_path)
    cur = compute_metrics(run_dir)
    res = CheckResult(str(run_dir), str(baseline_path), baseline_info={
        "created": base.get("created"),
        "git_commit": (base.get("provenance") or {}).get("git_commit")})
    res.rows = [Row(f"status:{n}", "status", "complete", c["status"], "worse",
                    note=c.get("error") or "")
                for n, c in cur["cells"].items() if c["status"] != "complete"]
    diffs: dict = {}
    names = list(base["metrics"]) + [n for n in cur["metrics"] if n not in base["metrics"]]
    res.rows += [_compare(n, base, cur, diffs) for n in names]
    res.config_diff = list(diffs)
    return verdict_of(res)


def verdict_of(res: CheckResult) -> CheckResult:
    """Set the verdict line and exit code from the rows: 1 when any row is worse, 2 when nothing was
    comparable (a stale baseline must not turn the CI check into a silent pass)."""
    worse = [r for r in res.rows if r.mark == "worse"]
    skipped = sum(r.mark == "not comparable" for r in res.rows)
    if worse:
        res.exit_code = 1
        res.verdict = f"FAIL: {len(worse)} regression(s):\n" + "\n".join(f"  {_fmt_failure(r)}"
                                                                         for r in worse)
    elif skipped == len(res.rows):
        res.exit_code = 2
        res.verdict = (f"STALE BASELINE: nothing comparable ({skipped} metric(s)); re-measure it "
                       "with `rlbench check RUN --update --baseline FILE`")
    else:
        better = sum(r.mark == "better" for r in res.rows)
        res.verdict = (f"PASS: {len(res.rows) - skipped} metric(s) compared, none worse beyond "
                       "tolerance and noise" + (f"; {better} better" + (" (refresh with --update?)"
                                                             if res.baseline_info.get("kind")
                                                                        != "A/B" else "")
                                      if better else "")
                       + (f"; {skipped} not comparable" if skipped else ""))
    return res


# ----------------------------------------------------------------- output


def _fmt_value(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _fmt_ci(r: Row) -> str:
    if r.ci is None:
        return ""
    if r.kind in ("ratio", "cost"):
        return f"95% interval of the change [{r.ci[0]:+.1%}, {r.ci[1]:+.1%}]"
    return f"95% CI of change [{r.ci[0]:+.3f}, {r.ci[1]:+.3f}]"


def _fmt_failure(r: Row) -> str:
    """'stage_cost:update:+periodic_async/sync +10.4% (95% interval ...): what it measures'."""
    what = f"{r.metric} {_fmt_change(r) or r.current}"
    ci = _fmt_ci(r)
    return what + (f" ({ci})" if ci else "") + (f": {r.description}" if r.description else "") + \
        (f" [{r.note}]" if (r.kind == "status" or r.current is None) and r.note else "")


def _fmt_change(r: Row) -> str:
    if r.delta is None:
        return ""
    rel = f"{r.change:+.1%}" if r.change is not None else ""
    return rel if r.kind in ("ratio",
                             "cost") else f"{r.delta:+.3f}" + (f" ({rel})" if rel and r.kind
                                                               != "invariant" else "")


def format_check(result: CheckResult, verdict: bool = True, head: bool = True) -> str:
    """Plain-text table (metric, baseline or old, current or new, change, mark, note); the last
    line is the verdict (verdict=False: the table alone). An A/B of two environments or configs
    opens with what differs between them beside the stages that moved (baseline_info "head";
    head=False: not)."""
    ab = result.baseline_info.get("kind") == "A/B"
    columns = ("metric", "old" if ab else "baseline", "new" if ab else "current", "change", "mark",
               "note")
    body = [(r.metric, _fmt_value(r.baseline), _fmt_value(r.current), _fmt_change(r), r.mark,
             r.note + (f"; {_fmt_ci(r)}" if r.ci else ""))
            for r in result.rows]
    widths = [max(len(row[i]) for row in [columns, *body]) for i in range(5)]
    if ab:
        lines = [*(result.baseline_info.get("head") or [] if head else []),
                 f"rlbench check: {result.run_dir} against {result.baseline_path}, "
                 "paired per iteration"]
    else:
        lines = [f"rlbench check: {result.run_dir} vs {result.baseline_path} (baseline created "
                 f"{result.baseline_info.get('created') or '?'}, commit "
                 f"{result.baseline_info.get('git_commit') or '?'})"]
    for row in [columns, *body]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[5])
    if result.config_diff:
        lines.append("not comparable, config differs from the baseline's: "
                     + "; ".join(result.config_diff))
    if verdict:
        lines.append(result.verdict)
    return "\n".join(line.rstrip() for line in lines)
