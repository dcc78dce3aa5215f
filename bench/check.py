"""`rlbench check`: compare a run (or ablation) with a committed baseline; a regression exits 1.

No absolute time is compared (machines differ and are noisy), only what a run measures against
itself, plus accuracy. Metric names are ``name:cells``:
  speedup:<cell>/<ref>       median per-iteration TPSPD of a cell / median of the reference cell
  <switch>_gain:<on>/<off>   the same ratio for two cells differing in one switch (tri_model_gain,
                             shared_prompt_gain, async_gain)
  overhead_share:<cell>      share of iteration wall time outside every stage of the main worker
  accuracy:<cell>, reward:<cell>   final eval pass@1; training reward of the last 3 iterations
A change is 'worse'/'better' only beyond the metric's tolerance *and* beyond noise: a seeded
percentile bootstrap (numpy; 2000 resamples; 95%) of the change run - baseline of the statistic
(median, or ratio of medians) over the per-iteration samples must exclude 0. Without samples
(accuracy, reward) the tolerance alone decides. Format and tolerances: bench/baselines/README.md.
"""
from __future__ import annotations

import datetime as _dt
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlbench import schema
from rlbench.errors import UserError
from rlbench.metrics import union_length

BASELINE_VERSION = 1
KINDS = ("ratio", "accuracy", "share")
DIRECTIONS = ("higher_is_better", "lower_is_better")
MARKS = ("better", "worse", "not significant", "not comparable")
# kind -> (relative tolerance, absolute floor); why these values: bench/baselines/README.md.
DEFAULT_TOLERANCES = {"ratio": (0.10, 0.0), "accuracy": (0.15, 0.05), "share": (0.50, 0.02)}
# switch -> (value with the switch on, value with it off)
SWITCHES = {"schedule": ("periodic_async", "sync"), "tri_model": (True, False), "shared_prompt": (True, False)}
GAIN_NAMES = {"schedule": "async_gain", "tri_model": "tri_model_gain", "shared_prompt": "shared_prompt_gain"}
CONFIG_SECTIONS = ("model", "data", "rollout", "train", "engine", "run")
IGNORED_KEYS = {"run.name", "engine.queue_timeout_s"}  # do not change what is measured
BOOTSTRAP = {"method": "percentile bootstrap of the change (run - baseline) of the metric's statistic",
             "resamples": 2000, "confidence": 0.95, "seed": 0}
MIN_SAMPLES = 3  # fewer samples per array: judge on the tolerance alone


# ----------------------------------------------------------------- metrics of a run


def _read_cells(run_dir: Path) -> tuple[str, dict[str, dict]]:
    """-> (reference cell, {cell: results dict}); a cell listed in ablation.json without results
    gets status "missing"."""
    run_dir = Path(run_dir)
    if schema.is_ablation(run_dir):
        try:
            abl = json.loads((run_dir / schema.ABLATION).read_text())
        except json.JSONDecodeError as e:
            raise UserError(f"{run_dir / schema.ABLATION}: not valid JSON ({e})") from None
        cells = {}
        for c in abl.get("cells") or []:
            d = run_dir / c["dir"]
            cells[c["name"]] = schema.load_cell(d) if schema.is_cell(d) else \
                {"cell": c["name"], "status": "missing", "switches": c.get("switches") or {},
                 "error": f"no {schema.RESULTS} in {d} (exit code {c.get('exit_code')})"}
        if not cells:
            raise UserError(f"{run_dir / schema.ABLATION}: lists no cells")
        return abl.get("reference") or next(iter(cells)), cells
    res = schema.load_run(run_dir)[0]  # a cell folder, or a clear UserError
    return res.get("cell") or "cell", {res.get("cell") or "cell": res}


def _measured(res: dict) -> list[dict]:
    """Post-warm-up iterations (all of them if every iteration is warm-up, as metrics.aggregate)."""
    its = res.get("iterations") or []
    return [it for it in its if not it.get("warmup")] or its


def _overhead_shares(res: dict) -> list[float]:
    """Per measured iteration: share of [start, end] in which the main worker recorded no stage."""
    events = schema.load_events(res["_dir"]) if res.get("_dir") else []
    steppers = Counter(e["worker"] for e in events if e["stage"] == "optimizer_step")
    main = steppers.most_common(1)[0][0] if steppers else None
    spans = defaultdict(list)  # iteration -> [(start, end)] of the main worker's stages
    for e in events:
        if e["worker"] == main and e["stage"] != "eval":
            spans[e["iteration"]].append((e["start"], e["end"]))
    out = []
    for it in _measured(res):
        start, end = it["start"], it["end"]
        covered = [(max(s, start), min(e, end)) for s, e in spans.get(it["iteration"], [])]
        if end > start and covered:
            out.append(max(0.0, 1.0 - union_length([c for c in covered if c[1] > c[0]]) / (end - start)))
    return out


def _metric(value, kind: str, direction: str, cells: list[str], description: str, samples=None) -> dict:
    return {"value": float(value), "samples": samples, "direction": direction, "kind": kind,
            "cells": cells, "description": description}


def _ratio(name: str, num: str, den: str, tpspd: dict, what: str) -> tuple[str, dict] | None:
    if not tpspd[num] or not tpspd[den] or np.median(tpspd[den]) <= 0:
        return None
    value = float(np.median(tpspd[num]) / np.median(tpspd[den]))
    return name, _metric(value, "ratio", "higher_is_better", [num, den],
                         f"{what}: median TPSPD of {num} / median TPSPD of {den}",
                         {"numerator": tpspd[num], "denominator": tpspd[den]})


def _switch_pairs(cells: dict, ref: str):
    """(switch, cell with it on, cell with it off) for two cells that differ in exactly that switch."""
    sw = {n: r.get("switches") or {} for n, r in cells.items()}
    for on_name, s_on in sw.items():
        for key, (on, off) in SWITCHES.items():
            if s_on.get(key) != on:
                continue
            for off_name, s_off in sw.items():  # a pair with the reference is a speedup row already
                if s_off == {**s_on, key: off} and off_name != ref:
                    yield key, on_name, off_name


def _cell_metrics(name: str, res: dict) -> dict:
    """overhead_share, accuracy and reward of one cell (those it has data for)."""
    out = {}
    shares = _overhead_shares(res)
    if shares:
        out[f"overhead_share:{name}"] = _metric(
            np.median(shares), "share", "lower_is_better", [name],
            "median share of iteration wall time outside every stage of the main worker",
            {"values": shares})
    evals = res.get("evals") or []
    if evals and evals[-1].get("iteration", 0) > 0:  # the eval before training is no final accuracy
        out[f"accuracy:{name}"] = _metric(evals[-1]["accuracy"], "accuracy", "higher_is_better", [name],
                                          f"final eval pass@1 (after iteration {evals[-1].get('iteration')})")
    its = res.get("iterations") or []
    if its:
        out[f"reward:{name}"] = _metric(np.mean([it["reward_mean"] for it in its[-3:]]), "accuracy",
                                        "higher_is_better", [name], "mean training reward, last 3 iterations")
    return out


def compute_metrics(run_dir: Path) -> dict:
    """Run or ablation folder -> {"reference", "cells": {name: {status, error, switches, config,
    provenance}}, "metrics": {name: {value, samples, direction, kind, cells, description}}}."""
    ref, cells = _read_cells(run_dir)
    tpspd = {n: [float(it["tpspd"]) for it in _measured(r)] for n, r in cells.items()}
    found = [_ratio(f"speedup:{n}/{ref}", n, ref, tpspd, "TPSPD speedup over the reference")
             for n in cells if n != ref]
    found += [_ratio(f"{GAIN_NAMES[k]}:{on}/{off}", on, off, tpspd, f"TPSPD gain of {k}")
              for k, on, off in _switch_pairs(cells, ref)]
    metrics = dict(m for m in found if m)
    for name, res in cells.items():
        metrics.update(_cell_metrics(name, res))
    info = {n: {"status": r.get("status", "?"), "error": r.get("error"), "switches": r.get("switches") or {},
                "config": r.get("config"), "provenance": r.get("provenance") or {}} for n, r in cells.items()}
    return {"reference": ref, "cells": info, "metrics": metrics}


# ----------------------------------------------------------------- baseline file


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and bool(np.isfinite(x))


def _validate_metric(m, key: str, bad) -> None:
    if not isinstance(m, dict):
        raise bad(key, "must be an object")
    if not _is_number(m.get("value")):
        raise bad(f"{key}.value", f"must be a number, got {m.get('value')!r}")
    for k, what in (("tolerance", "a relative fraction"), ("abs_tolerance", "an absolute floor")):
        if (k in m or k == "tolerance") and not (_is_number(m.get(k)) and m[k] >= 0):
            raise bad(f"{key}.{k}", f"must be a number >= 0 ({what}), got {m.get(k)!r}")
    for k, allowed in (("direction", DIRECTIONS), ("kind", KINDS)):
        if m.get(k) not in allowed:
            raise bad(f"{key}.{k}", f"must be one of {', '.join(allowed)}, got {m.get(k)!r}")
    s = m.get("samples")
    if s is not None and not (isinstance(s, dict) and set(s) in ({"values"}, {"numerator", "denominator"})
                              and all(isinstance(v, list) and all(map(_is_number, v)) for v in s.values())):
        raise bad(f"{key}.samples", "must be {values: [numbers]} or {numerator: [...], denominator: [...]}")


def load_baseline(path: Path) -> dict:
    """Read and validate a baseline file; anything malformed is a UserError naming file and key."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: baseline file not found (write one: rlbench check RUN_DIR --update "
                        f"--baseline {path})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None

    def bad(key: str, msg: str) -> UserError:
        return UserError(f"{path}: key '{key}': {msg}")

    if not isinstance(data, dict):
        raise bad("(top level)", "must be a JSON object")
    if data.get("schema_version") != BASELINE_VERSION:
        raise bad("schema_version", f"must be {BASELINE_VERSION}, got {data.get('schema_version')!r}")
    for key in ("config", "config.reference", "config.cells", "metrics"):
        node = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise bad(key, "missing" if node is None else "must be an object")
    for name, m in data["metrics"].items():
        _validate_metric(m, f"metrics.{name}", bad)
    return data


def write_baseline(run_dir: Path, baseline_path: Path, tolerances: dict | None = None) -> Path:
    """Write a baseline from a complete run. Tolerances already in an existing baseline file are kept
    (they are hand-tuned); `tolerances` ({kind or metric name: relative fraction}) overrides them."""
    cur = compute_metrics(run_dir)
    broken = [f"{n} ({c['status']})" for n, c in cur["cells"].items() if c["status"] != "complete"]
    if broken:
        raise UserError(f"{run_dir}: a baseline needs every cell complete, not: {', '.join(broken)}")
    path, previous, notes = Path(baseline_path), {}, None
    if path.is_file():
        try:
            old = load_baseline(path)
            previous = {n: (m["tolerance"], m.get("abs_tolerance", 0.0)) for n, m in old["metrics"].items()}
            notes = old.get("notes")
        except UserError:
            pass  # a broken old file is simply replaced
    metrics, given = {}, tolerances or {}
    for name, m in cur["metrics"].items():  # explicit by name > by kind > previous file > default
        rel, floor = previous.get(name) or DEFAULT_TOLERANCES[m["kind"]]
        rel = float(given.get(name, given.get(m["kind"], rel)))
        metrics[name] = {**m, "tolerance": rel, "abs_tolerance": floor}
    ref = cur["reference"]
    obj = {"schema_version": BASELINE_VERSION,
           "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "config": {"reference_cell": ref, "reference": cur["cells"][ref]["config"],
                      "cells": {n: c["switches"] for n, c in cur["cells"].items()}},
           "provenance": {**cur["cells"][ref]["provenance"], "run_dir": str(run_dir)},
           "statistics": BOOTSTRAP, "metrics": metrics,
           "notes": notes or "Written by `rlbench check --update`; tolerances: bench/baselines/README.md."}
    schema.atomic_write_json(path, obj)
    return path


def parse_tolerances(pairs: list[str]) -> dict:
    """['ratio=0.1', 'accuracy:sync=0.2'] -> {'ratio': 0.1, 'accuracy:sync': 0.2} (for --tolerance)."""
    out = {}
    for pair in pairs:
        key, _, raw = pair.rpartition("=")
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not key.strip() or not (np.isfinite(value) and value >= 0):
            raise UserError(f"--tolerance {pair!r}: expected KIND_OR_METRIC=FRACTION >= 0, e.g. ratio=0.1")
        out[key.strip()] = value
    return out


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
    ci: tuple[float, float] | None = None  # 95% bootstrap interval of delta
    note: str = ""


@dataclass
class CheckResult:
    run_dir: str
    baseline_path: str
    rows: list[Row] = field(default_factory=list)
    verdict: str = ""
    exit_code: int = 0  # 0 pass, 1 regression (bad input raises UserError: exit 2)
    baseline_info: dict = field(default_factory=dict)  # created, git_commit
    config_diff: list[str] = field(default_factory=list)  # "key: baseline -> run" behind 'not comparable'


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in (tree or {}).items():
        key = f"{prefix}{k}"
        out.update(_flat(v, f"{key}.") if isinstance(v, dict) else {key: v})
    return out


def _config_diff(cells: list[str], base: dict, cur: dict) -> list[str]:
    """Keys that matter and differ between the baseline's and the run's config of these cells."""
    diff = []
    for cell in cells:
        sw = base["config"]["cells"].get(cell)
        now = (cur["cells"].get(cell) or {}).get("config")
        if sw is None or now is None:
            diff.append(f"cell {cell} {'not in the baseline' if sw is None else 'has no config in this run'}")
            continue
        ref = base["config"]["reference"]
        was = _flat({**ref, "engine": {**(ref.get("engine") or {}), **sw}})
        now = _flat(now)
        diff += [f"{k}: {was.get(k, '-')} -> {now.get(k, '-')}" for k in sorted(set(was) | set(now))
                 if k.split(".")[0] in CONFIG_SECTIONS and k not in IGNORED_KEYS and was.get(k) != now.get(k)]
    return list(dict.fromkeys(diff))


def _bootstrap_delta(b: dict | None, c: dict | None) -> tuple[float, float] | None:
    """95% percentile interval of (run statistic - baseline statistic), or None without samples."""
    if not b or not c or set(b) != set(c) or min(len(v) for v in [*b.values(), *c.values()]) < MIN_SAMPLES:
        return None
    rng = np.random.default_rng(BOOTSTRAP["seed"])  # per metric: results do not depend on metric order

    def stat(samples: dict) -> np.ndarray:  # [B] replicates of median(values) or median(num)/median(den)
        med = {}
        for k, v in samples.items():
            x = np.asarray(v, dtype=float)
            med[k] = np.median(x[rng.integers(0, len(x), (BOOTSTRAP["resamples"], len(x)))], axis=1)
        return med["values"] if "values" in med else med["numerator"] / med["denominator"]

    d = stat(c) - stat(b)
    tail = (1 - BOOTSTRAP["confidence"]) / 2 * 100
    lo, hi = np.percentile(d, [tail, 100 - tail])
    return float(lo), float(hi)


def _judge(b: dict, c: dict) -> tuple[str, tuple | None, str]:
    """(mark, interval, note): worse/better only beyond tolerance and beyond noise."""
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
    row = Row(name, (b or c)["kind"], b and b["value"], c and c["value"], "not comparable")
    if b is None or c is None:
        row.note = "not in the baseline" if b is None else "not measured in this run"
        return row
    row.delta = c["value"] - b["value"]
    row.change = c["value"] / b["value"] - 1 if b["value"] else None
    diff = _config_diff(b.get("cells") or c["cells"], base, cur)
    if diff:
        diffs.update(dict.fromkeys(diff))
        row.note = "config differs: " + ", ".join(dict.fromkeys(d.split(":")[0] for d in diff))
        return row
    row.mark, row.ci, row.note = _judge(b, c)
    return row


def check(run_dir: Path, baseline_path: Path) -> CheckResult:
    """Compare a run with a baseline. exit_code 1 when any metric is 'worse' or a cell did not complete."""
    base = load_baseline(baseline_path)
    cur = compute_metrics(run_dir)
    res = CheckResult(str(run_dir), str(baseline_path), baseline_info={
        "created": base.get("created"), "git_commit": (base.get("provenance") or {}).get("git_commit")})
    res.rows = [Row(f"status:{n}", "status", "complete", c["status"], "worse", note=c.get("error") or "")
                for n, c in cur["cells"].items() if c["status"] != "complete"]
    diffs: dict = {}
    names = list(base["metrics"]) + [n for n in cur["metrics"] if n not in base["metrics"]]
    res.rows += [_compare(n, base, cur, diffs) for n in names]
    res.config_diff = list(diffs)
    worse = [r for r in res.rows if r.mark == "worse"]
    skipped = sum(r.mark == "not comparable" for r in res.rows)
    if worse:
        res.exit_code = 1
        res.verdict = f"FAIL: {len(worse)} regression(s): " + ", ".join(
            f"{r.metric} {_fmt_change(r) or r.current}" for r in worse)
    elif skipped == len(res.rows):
        res.verdict = f"PASS: nothing comparable ({skipped} metric(s) not comparable)"
    else:
        better = sum(r.mark == "better" for r in res.rows)
        res.verdict = (f"PASS: {len(res.rows) - skipped} metric(s) compared, none worse beyond tolerance "
                       "and noise" + (f"; {better} better (refresh with --update?)" if better else "")
                       + (f"; {skipped} not comparable" if skipped else ""))
    return res


# ----------------------------------------------------------------- output


def _fmt_value(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _fmt_change(r: Row) -> str:
    if r.delta is None:
        return ""
    rel = f"{r.change:+.1%}" if r.change is not None else ""
    return rel if r.kind == "ratio" else f"{r.delta:+.3f}" + (f" ({rel})" if rel else "")


def format_check(result: CheckResult) -> str:
    """Plain-text table (metric, baseline, current, change, mark, note); the last line is the verdict."""
    head = ("metric", "baseline", "current", "change", "mark", "note")
    body = [(r.metric, _fmt_value(r.baseline), _fmt_value(r.current), _fmt_change(r), r.mark,
             r.note + (f"; 95% CI of change [{r.ci[0]:+.3f}, {r.ci[1]:+.3f}]" if r.ci else ""))
            for r in result.rows]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(5)]
    lines = [f"rlbench check: {result.run_dir} vs {result.baseline_path} "
             f"(baseline created {result.baseline_info.get('created') or '?'}, "
             f"commit {result.baseline_info.get('git_commit') or '?'})"]
    for row in [head, *body]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[5])
    if result.config_diff:
        lines.append("not comparable, config differs from the baseline's: " + "; ".join(result.config_diff))
    lines.append(result.verdict)
    return "\n".join(line.rstrip() for line in lines)
