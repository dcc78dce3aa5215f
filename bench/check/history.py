"""The history of accepted A/B results (`rlbench check --record FILE`): one JSON line per passing A/B run.

Each line holds what one `rlbench check --against` measured: every paired metric's ratio new / old with its
95% interval and mark, the commit pair, the workload, the machine and its load, the date, the verdict. A step
(kind "step") is the gate's A/B of the accepted commit against a newer one; an anchor A/B (kind "anchor")
compares a newer commit directly with the history's anchor (bench/check/drift.py). Chained, the steps give
every metric a series relative to one fixed anchor commit (`series`): each ratio was measured on one
machine in one run, so the series needs no two machines to be alike.

JSON Lines, not SQLite: the repository commits its history beside bench/baselines/ACCEPTED, and a line per
entry diffs, reviews and merges as text (a SQLite file is one binary blob to git); a damaged line is named by
its number; the standard library reads it. Writing is append-only and atomic: under an exclusive lock, the
file is read and validated whole (a corrupt or foreign file is refused with exit 2, naming the file and
line, and nothing is written), then its bytes, unchanged, plus the new line go to a temporary file that
replaces it (fsync, rename), so a crash leaves the old file or the new one, never half a line.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rlbench.core.errors import UserError
from rlbench.core.results import provenance
from rlbench.core.results.metric_table import CHECK_FAMILIES, family

FORMAT = "rlbench-check-history"
VERSION = 1
KINDS = ("step", "anchor")
REQUIRED = {"format": str, "version": int, "kind": str, "date": str, "old_commit": str, "new_commit": str,
            "workload": dict, "machine": dict, "verdict": dict, "metrics": dict}


def entry(kind: str, record: dict, result, confirmed_by: str | None = None, reanchor: bool = False) -> dict:
    """One history line from an A/B folder's ab.json (record) and its judgement (a CheckResult): every
    paired metric as its ratio new / old, the 95% interval of it (none for one value per tree) and mark."""
    metrics = {}
    for r in result.rows:
        if r.paired and r.change is not None and family(r.metric) in CHECK_FAMILIES:
            metrics[r.metric] = {"ratio": round(1 + r.change, 6), "low": _bound(r, 0), "high": _bound(r, 1),
                                 "mark": r.mark, "direction": CHECK_FAMILIES[family(r.metric)].direction}
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"format": FORMAT, "version": VERSION, "kind": kind, "date": provenance.now(),
            "old_commit": record["old_commit"], "new_commit": record.get("new_commit") or "unknown",
            "against": record.get("against"), "workload": workload(record),
            "machine": {**provenance.machine(), "load": [round(x, 2) for x in load] if load else None},
            "verdict": {"exit_code": result.exit_code, "line": result.verdict.splitlines()[0]},
            "planted": record.get("planted") or {}, "ab": record.get("folder"), "confirmed_by": confirmed_by,
            "reanchor": reanchor, "metrics": metrics}


def _bound(row, i: int) -> float | None:
    return round(1 + row.ci[i], 6) if row.ci else None


def workload(record: dict) -> dict:
    """What both trees ran: the config file (relative to the source tree where it lies in it), the ablation
    and the --set overrides; entries chain only within one workload."""
    config = Path(record.get("config") or "")
    try:
        config = config.resolve().relative_to(provenance.source_root())
    except ValueError:
        pass
    return {"config": config.as_posix(), "ablation": record.get("ablation"), "sets": list(record.get("sets") or [])}


# ----------------------------------------------------------------- reading and appending


def read(path: Path) -> list[dict]:
    """Every entry of a history file, in order; [] when it does not exist. A line that is not an entry of
    this format (corrupt, truncated, another file's) is a UserError naming the file and the line."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the history file ({e})") from None
    return [_parse(path, n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _parse(path: Path, n: int, line: str) -> dict:
    where = f"{path}:{n}"
    try:
        e = json.loads(line)
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: not a JSON line ({err.msg}, column {err.colno}): a corrupt or truncated "
                        "history entry; the lines before it are intact") from None
    if not isinstance(e, dict) or e.get("format") != FORMAT:
        raise UserError(f"{where}: not an `rlbench check --record` history entry (no \"format\": \"{FORMAT}\"): "
                        "a foreign file? Give a history file, or a new path to start one")
    if e.get("version") != VERSION:
        raise UserError(f"{where}: history version {e.get('version')!r}; this rlbench reads version {VERSION}")
    for key, kind in REQUIRED.items():
        if not isinstance(e.get(key), kind):
            raise UserError(f"{where}: key {key!r} missing or not a {kind.__name__}")
    if e["kind"] not in KINDS:
        raise UserError(f"{where}: kind {e['kind']!r}; allowed: {', '.join(KINDS)}")
    for name, m in e["metrics"].items():
        ratio = m.get("ratio") if isinstance(m, dict) else None
        if not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0:
            raise UserError(f"{where}: metric {name!r} needs a positive \"ratio\" (new / old), got {m!r}")
    return e


def append(path: Path, new: dict) -> int:
    """Append one entry atomically (see the module's docstring); -> its line number. The existing file
    must be a valid history: a corrupt or foreign one is refused (exit 2) and left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(new, sort_keys=False, separators=(",", ":")) + "\n"
    _parse(path, 0, line)  # what is written must read back
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two recorders never interleave their read and rename
        old = path.read_bytes() if path.exists() else b""
        entries = read(path)
        if old and not old.endswith(b"\n"):
            raise UserError(f"{path}:{len(old.splitlines())}: the last line has no line end (truncated?); "
                            "nothing appended")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(old + line.encode())
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return len(entries) + 1


# ----------------------------------------------------------------- chained series


@dataclass
class Point:
    """One commit of a metric's series: its level relative to the anchor commit (a ratio, the product of
    the chained steps' ratios) with its 95% interval, and the entry (line index) that measured it."""
    commit: str
    level: float
    low: float | None
    high: float | None
    index: int  # the entry's index in the history (0-based); -1 for the anchor itself
    date: str


def same_workload(entries: list[dict], wl: dict) -> list[tuple[int, dict]]:
    return [(i, e) for i, e in enumerate(entries) if e["workload"] == wl]


def anchor_of(entries: list[dict], wl: dict) -> tuple[str | None, int]:
    """(anchor commit, index of its first step) of a workload: the old commit of its first step, or of the
    last step marked `reanchor` (an intended change of performance starts a new series)."""
    steps = [(i, e) for i, e in same_workload(entries, wl) if e["kind"] == "step"]
    start = max((k for k, (_, e) in enumerate(steps) if e.get("reanchor")), default=0)
    return (steps[start][1]["old_commit"], steps[start][0]) if steps else (None, 0)


def series(entries: list[dict], wl: dict) -> dict[str, list[Point]]:
    """{metric: [Point]} of one workload from its anchor on: the anchor at level 1, then each step whose old
    commit has a level, at level(old) x ratio (log-variances add: independent A/B runs). An A/B against the
    anchor measures its commit's level directly: it is combined with the chained one (inverse-variance; the
    direct one alone where either has no interval), so the chain's noise, a random walk, grows only over
    the steps since the last anchor A/B. A metric the anchor predates starts at the first step that
    measures it, its old commit at level 1."""
    anchor, start = anchor_of(entries, wl)
    out: dict[str, list[Point]] = {}
    levels: dict[str, dict[str, tuple[float, float]]] = {}  # metric -> commit -> (log level, log variance)
    for i, e in same_workload(entries, wl):
        if i < start or (e["kind"] == "anchor" and e["old_commit"] != anchor):
            continue
        for name, m in e["metrics"].items():
            known = levels.setdefault(name, {})
            if e["kind"] == "anchor":
                if known:
                    _rebase(out[name], known, e["new_commit"], m, i, e["date"])
                continue
            if not known:  # its first measurement: the series starts at the old commit
                known[e["old_commit"]] = (0.0, 0.0)
                out[name] = [Point(e["old_commit"], 1.0, 1.0, 1.0, -1 if e["old_commit"] == anchor else i, e["date"])]
            if e["old_commit"] not in known:
                continue  # a step off the chain (its old commit was never measured): not chained
            v, var = known[e["old_commit"]]
            known[e["new_commit"]] = (v + math.log(m["ratio"]), var + _log_var(m))
            out[name].append(_point(e["new_commit"], *known[e["new_commit"]], i, e["date"]))
    return out


def _point(commit: str, v: float, var: float, index: int, date: str) -> Point:
    half = 1.96 * math.sqrt(var) if math.isfinite(var) else None
    return Point(commit, math.exp(v), math.exp(v - half) if half is not None else None,
                 math.exp(v + half) if half is not None else None, index, date)


def _rebase(points: list[Point], known: dict, commit: str, m: dict, i: int, date: str) -> None:
    """An A/B against the anchor measured `commit`'s level directly: combine it with the chained level (the
    commit's point, when it is the last one) or add it as a point of its own."""
    direct = (math.log(m["ratio"]), _log_var(m))
    if commit in known and math.isfinite(known[commit][1]) and math.isfinite(direct[1]):
        (a, va), (b, vb) = known[commit], direct
        w = vb / (va + vb) if va + vb > 0 else 0.5
        direct = (w * a + (1 - w) * b, va * vb / (va + vb) if va + vb > 0 else 0.0)
    known[commit] = direct
    if points and points[-1].commit == commit:
        points[-1] = _point(commit, *direct, points[-1].index, points[-1].date)
    else:
        points.append(_point(commit, *direct, i, date))


def _log_var(m: dict) -> float:
    """The variance of log(ratio) from its 95% interval; inf where the metric has none (one value per tree)."""
    if m.get("low") and m.get("high"):
        return ((math.log(m["high"]) - math.log(m["low"])) / (2 * 1.96)) ** 2
    return math.inf
