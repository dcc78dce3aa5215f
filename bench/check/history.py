"""The history of accepted A/B results (`rlbench check --record FILE`): one JSON line per passing
A/B run.

Each line holds what one `rlbench check --against` measured: every paired metric's ratio new / old
with its 95% interval and mark, the commit pair, the workload, the machine and its load, the date,
the verdict. A step (kind "step") is the gate's A/B of the accepted commit against a newer one; an
anchor A/B (kind "anchor") compares a newer commit directly with the history's anchor
(bench/check/drift.py). Chained, the steps give every metric a series relative to one fixed anchor
commit (`series`): each ratio was measured on one machine in one run, so the series needs no two
machines to be alike.

JSON Lines, not SQLite: the repository commits its history beside bench/baselines/ACCEPTED, and a
line per entry diffs, reviews and merges as text (a SQLite file is one binary blob to git); a
damaged line is named by its number; the standard library reads it. Writing is append-only and
atomic: under an exclusive lock, the file is read and validated whole (a corrupt or foreign file is
refused with exit 2, naming the file and line, and nothing is written), then its bytes, unchanged,
plus the new line go to a temporary file that replaces it (fsync, rename), so a crash leaves the old
file or the new one, never half a line.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from scipy import special

from rlbench.check import ab as check_ab, lifecycle
from rlbench.check.history_line import FORMAT, VERSION, parse
from rlbench.core.errors import UserError
from rlbench.core.results import provenance
from rlbench.core.results.metric_table import CHECK_FAMILIES, family


def entry(kind: str, record: dict, result, confirmed_by: str | None = None,
          reanchor: bool = False) -> dict:
    """One history line from an A/B folder's ab.json (record) and its judgement (a CheckResult):
    every paired metric as its ratio new / old, the 95% interval of it and the standard error of its
    log (none for one value per tree) and mark; the
    date and load average of the A/B run where ab.json has them, else of now."""
    metrics = {}
    for r in result.rows:
        if r.paired and r.change is not None and family(r.metric) in CHECK_FAMILIES:
            metrics[r.metric] = {"ratio": round(1 + r.change, 6), "low": _bound(r, 0),
                                 "high": _bound(r, 1),
                                 "se": round(r.se, 6) if r.se is not None else None,
                                 "mark": r.mark,
                                 "direction": CHECK_FAMILIES[family(r.metric)].direction}
    load = record.get("load") or (os.getloadavg() if hasattr(os, "getloadavg") else None)
    return {"format": FORMAT, "version": VERSION, "kind": kind,
            "date": record.get("date") or provenance.now(),
            "old_commit": record["old_commit"], "new_commit": record.get("new_commit") or "unknown",
            "against": record.get("against"), "workload": workload(record),
            "machine": {**provenance.machine(),
                        "load": [round(x, 2) for x in load] if load else None},
            "verdict": {"exit_code": result.exit_code, "line": result.verdict.splitlines()[0]},
            "planted": record.get("planted") or {}, "ab": record.get("folder"),
            "confirmed_by": confirmed_by,
            "reanchor": reanchor, "metrics": metrics}


def _bound(row, i: int) -> float | None:
    return round(1 + row.ci[i], 6) if row.ci else None


def workload(record: dict) -> dict:
    """What both trees ran: the config file (relative to the source tree; a checkout's configs/NAME
    as configs/NAME wherever the checkout lies), the ablation and the --set overrides; entries chain
    only within one workload. An A/B of two environments or configs (bench/check/env_ab.py) adds
    what kind it is, its engine and B's own overrides, so that its steps never chain with a commit
    A/B's."""
    config = Path(record.get("config") or "")
    try:
        config = config.resolve().relative_to(provenance.source_root())
    # another checkout's configs/ (another clone of the project, the A/B's own tree)
    except ValueError:
        config = Path("configs", config.name) if config.parent.name == "configs" else config
    out = {"config": config.as_posix(), "ablation": record.get("ablation"),
           "sets": list(record.get("sets") or [])}
    if record.get("mode"):
        out.update(mode=record["mode"], engine=record.get("engine") or "rlbench",
                   sets_b=list(record.get("sets_b") or []))
    return out


# ----------------------------------------------------------------- reading and appending


def read(path: Path) -> list[dict]:
    """Every entry of a history file, in order; [] when it does not exist. A line that is not an
    entry of this format (corrupt, truncated, another file's) is a UserError naming the file and the
    line."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the history file ({e})") from None
    return [parse(path, n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def append(path: Path, new: dict) -> int:
    """Append one entry atomically (see the module's docstring); -> its line number. The existing
    file must be a valid history: a corrupt or foreign one is refused (exit 2) and left as it
    was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(new, sort_keys=False, separators=(",", ":")) + "\n"
    parse(path, 0, line)  # what is written must read back
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two recorders never interleave their read and rename
        old = path.read_bytes() if path.exists() else b""
        entries = read(path)
        if old and not old.endswith(b"\n"):
            raise UserError(f"{path}:{len(old.splitlines())}: the last line has no line end "
                            "(truncated?); nothing appended")
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
    """One commit of a metric's series: its level relative to the anchor commit (a ratio, the
    product of the chained steps' ratios) with its 95% interval, and the entry (line index) that
    measured it."""
    commit: str
    level: float
    low: float | None
    high: float | None
    index: int  # the entry's index in the history (0-based); -1 for the anchor itself
    date: str
    var: float = 0.0  # the variance of log(level): the chained steps' variances added up
    # the steps chained from the anchor to this commit, along the ancestry recorded: {entry index:
    # its log-variance}. Two points' levels differ by the steps on one path and not the other
    # (walk_z).
    path: dict = field(default_factory=dict)

    def var_since(self, other: "Point") -> float:
        """The variance of log(self.level / other.level): the steps on one point's path and not on
        the other's (independent A/B runs). Along a chain that is the difference of the chained
        variances; for two steps from the same old commit (a retry, a sibling) it is both steps'
        variances."""
        return sum(v for i, v in self.path.items() if i not in other.path) + \
            sum(v for i, v in other.path.items() if i not in self.path)


def same_workload(entries: list[dict], wl: dict) -> list[tuple[int, dict]]:
    return [(i, e) for i, e in enumerate(entries) if e["workload"] == wl]


@dataclass
class Chain:
    """The steps of a workload that chain from its current anchor. steps: their entry indices;
    start: the index from which the series runs (the anchoring entry); off: (entry, why) of steps
    left out, named; moves: (entry, what) of every re-anchoring, in order."""
    anchor: str | None
    start: int = 0
    steps: list[int] = field(default_factory=list)
    off: list[tuple[int, str]] = field(default_factory=list)
    moves: list[tuple[int, str]] = field(default_factory=list)


def chain_of(entries: list[dict], wl: dict) -> Chain:
    """The workload's current chain. It starts at the old commit of its first step; a step recorded
    with `reanchor` (an A/B of a move of ACCEPTED that changes performance on purpose) starts it
    anew at that step's new commit; a step whose old commit is not on the chain is left out and
    named, unless later steps go on from it and none from the chain: then it starts the chain anew
    at its old commit (ACCEPTED moved without a recorded A/B: the steps since are measured against a
    commit the chain never reached), named too. Nothing is dropped unsaid."""
    steps = [(i, e) for i, e in same_workload(entries, wl) if e["kind"] == "step"]
    if not steps:
        return Chain(None)
    c = Chain(steps[0][1]["old_commit"], steps[0][0])
    known = {c.anchor}
    for n, (i, e) in enumerate(steps):
        old, new = e["old_commit"], e["new_commit"]
        if e.get("reanchor"):
            c.moves.append((i, f"re-anchored at {new[:10]} by entry {i + 1}: the A/B of {new[:10]} "
                               f"against {old[:10]}, a move of performance on purpose"))
            c.anchor, c.start, c.steps, known = new, i, [], {new}
        elif old in known:
            c.steps.append(i)
            known.add(new)
        elif any(later["old_commit"] in known and not later.get("reanchor")
                 for _, later in steps[n + 1:]):
            c.off.append((i, f"entry {i + 1} ({old[:10]} -> {new[:10]}): its old commit is not on "
                             f"the chain from the anchor {c.anchor[:10]}; left out of the series"))
        elif not any(later["old_commit"] in (old, new) for _, later in steps[n + 1:]):
            c.off.append((i, f"entry {i + 1} ({old[:10]} -> {new[:10]}): its old commit is not on "
                             f"the chain from the anchor {c.anchor[:10]}; left out of the series "
                             "(ACCEPTED moved without a recorded A/B? the next step from it starts "
                             "the series anew there)"))
        else:
            c.moves.append((i, f"re-anchored at {old[:10]} by entry {i + 1}: {old[:10]} was never "
                               f"measured against the anchor {c.anchor[:10]} (ACCEPTED moved "
                               "without a recorded A/B of the move: `rlbench check --reanchor "
                               f"--record` records one); the {len(c.steps)} step(s) before are not "
                               f"chained to it"))
            c.anchor, c.start, c.steps, known = old, i, [i], {old, new}
    return c


def anchor_of(entries: list[dict], wl: dict) -> tuple[str | None, int]:
    """(anchor commit, index of the entry the series starts at) of a workload (chain_of)."""
    c = chain_of(entries, wl)
    return c.anchor, c.start


def series(entries: list[dict], wl: dict) -> dict[str, list[Point]]:
    """{metric: [Point]} of one workload from its anchor on (the steps of chain_of): the anchor at
    level 1, then each step whose old commit has a level, at level(old) x ratio; the log-variances
    of the steps add up (independent A/B runs), each step's the largest of its interval's, the
    spread of the metric's steps (step_spread) and (floor / 4)^2. A/Bs against the anchor do not
    enter the series: they confirm or clear what it shows (bench/check/drift.py). A metric the
    anchor predates starts at the first step that measures it, its old commit at level 1."""
    c = chain_of(entries, wl)
    anchor, spread = c.anchor, step_spread(entries, wl)
    out: dict[str, list[Point]] = {}
    # metric -> commit -> (log level, path: step -> var)
    levels: dict[str, dict[str, tuple[float, dict]]] = {}
    for i in c.steps:
        e = entries[i]
        for name, m in e["metrics"].items():
            known = levels.setdefault(name, {})
            if not known:  # its first measurement: the series starts at the old commit
                known[e["old_commit"]] = (0.0, {})
                out[name] = [Point(e["old_commit"], 1.0, 1.0, 1.0,
                                   -1 if e["old_commit"] == anchor else i, e["date"])]
            if e["old_commit"] not in known:
                continue  # a step off the chain (its old commit was never measured): not chained
            v, path = known[e["old_commit"]]
            known[e["new_commit"]] = (v + math.log(m["ratio"]),
                                      {**path, i: _step_var(m, name, spread)})
            out[name].append(_point(e["new_commit"], *known[e["new_commit"]], i, e["date"]))
    return out


MIN_STEPS = 5  # steps of a metric before its step-to-step spread is estimated from them
SPREAD_UPPER = 0.9  # the spread is taken at this upper confidence bound (step_spread)


def floor(name: str) -> float:
    """A metric's per-step flag line (bench/check/ab.py floor_of; the metrics outside the
    iterations: their FLOORS). The floors are set at about 4 times a step's measured noise
    (bench/check/lifecycle_noise.py), so a chained step's noise is taken as at least floor / 4 in
    log units, whatever its own interval says."""
    if family(name) in lifecycle.FLOORS:
        return lifecycle.floor(name, {})
    return check_ab.floor_of(name)


def step_spread(entries: list[dict], wl: dict) -> dict[str, float]:
    """{metric: variance of one step's log-ratio} from the workload's steps themselves. A step's
    interval is its A/B run's own iteration-to-iteration noise; between runs a metric also moves by
    each process's offset (1-2x that error on unchanged runs, more on a busy machine:
    docs/results/ci-gate.md), and one value per tree has no interval at all. From the differences of
    consecutive steps' log-ratios (a steady drift cancels in them): their mean square / 2, taken at
    the upper end of what so few steps say (x d / chi2_d's 10% point, d the differences: 2.3x at 9
    steps, 1.7x at 16), since a spread estimated low from a handful of steps makes every z of that
    metric too large (an unchanged history then "drifts" in its noisiest metric). Metrics with fewer
    than MIN_STEPS steps: none."""
    per: dict[str, list[float]] = {}
    for _, e in same_workload(entries, wl):
        if e["kind"] == "step":
            for name, m in e["metrics"].items():
                per.setdefault(name, []).append(math.log(m["ratio"]))
    out = {}
    for name, x in per.items():
        if len(x) >= MIN_STEPS:
            d = [b - a for a, b in zip(x, x[1:])]
            out[name] = sum(v * v for v in d) / len(d) / 2 * len(d) / special.chdtri(len(d),
                                                                                     SPREAD_UPPER)
    return out


def _point(commit: str, v: float, path: dict, index: int, date: str) -> Point:
    var = sum(path.values())
    half = 1.96 * math.sqrt(var) if math.isfinite(var) else None
    return Point(commit, math.exp(v), math.exp(v - half) if half is not None else None,
                 math.exp(v + half) if half is not None else None, index, date, var, path)


def _step_var(m: dict, name: str, spread: dict) -> float:
    """The variance of one A/B run's log-ratio of a metric: the larger of its own and the spread of
    the metric's steps (step_spread: the run-to-run offsets its own misses, at the upper end of what
    the steps say); with too few steps for a spread, (floor / 4)^2 in its place (the floors sit at
    about 4 times a step's measured noise). The floor's quarter is not a minimum where the steps
    measure the spread: for cost:update it is 1.5% a step against the 0.5-0.7% this repository's
    steps scatter by, and it hid a chained drift of 1.5% a step (docs/results/ci-gate.md, 'Drift
    over the history')."""
    own = _log_var(m)
    guard = spread[name] if name in spread else (math.log1p(floor(name)) / 4) ** 2
    return max(own if math.isfinite(own) else 0.0, guard)


def _log_var(m: dict) -> float:
    """The variance of log(ratio): the A/B's own standard error squared (`se`, the trimmed mean's
    Tukey-McLaughlin error of the per-iteration log-ratios). An entry recorded before `se` was kept
    has only the 95% interval, a t-interval on few degrees of freedom: its half-width over 1.96
    overstates the variance by (t / 1.96)^2 (4.8x at 5 iterations, 1.7x at 8), which errs towards
    fewer drift verdicts. inf where the metric has neither (one value per tree)."""
    if isinstance(m.get("se"), (int, float)):
        return float(m["se"]) ** 2
    if m.get("low") and m.get("high"):
        return ((math.log(m["high"]) - math.log(m["low"])) / (2 * 1.96)) ** 2
    return math.inf
