"""One line of a history file (bench/check/history.py): its format, its version and the checks
that refuse a line the drift code could not read (exit 2 naming the file and line)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from rlbench.core.errors import UserError

FORMAT = "rlbench-check-history"
VERSION = 1
KINDS = ("step", "anchor")
REQUIRED = {"format": str, "version": int, "kind": str, "date": str, "old_commit": str,
            "new_commit": str,
            "workload": dict, "machine": dict, "verdict": dict, "metrics": dict}


def parse(path: Path, n: int, line: str) -> dict:
    """Line n of the history file at path as an entry; a UserError naming the file and line where
    it is not one of this format and version with every key the drift code reads."""
    where = f"{path}:{n}"
    try:
        e = json.loads(line)
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: not a JSON line ({err.msg}, column {err.colno}): a corrupt or "
                        "truncated history entry; the lines before it are intact") from None
    if not isinstance(e, dict) or e.get("format") != FORMAT:
        raise UserError(f"{where}: not an `rlbench check --record` history entry (no \"format\": "
                        f"\"{FORMAT}\"): "
                        "a foreign file? Give a history file, or a new path to start one")
    if e.get("version") != VERSION:
        raise UserError(f"{where}: history version {e.get('version')!r}; this rlbench reads "
                        f"version {VERSION}")
    for key, kind in REQUIRED.items():
        if not isinstance(e.get(key), kind):
            raise UserError(f"{where}: key {key!r} missing or not a {kind.__name__}")
    if e["kind"] not in KINDS:
        raise UserError(f"{where}: kind {e['kind']!r}; allowed: {', '.join(KINDS)}")
    _check_workload(where, e["workload"])
    if not isinstance(e.get("reanchor", False), bool):
        raise UserError(f"{where}: \"reanchor\" must be true or false, got {e['reanchor']!r}")
    for name, m in e["metrics"].items():
        _check_metric(where, name, m)
    return e


DIRECTIONS = ("higher_is_better", "lower_is_better")


def _check_workload(where: str, wl: dict) -> None:
    """The workload keys drift chains by: config (a path), ablation (a name or null), sets
    (strings)."""
    ok = isinstance(wl.get("config"),
                    str) and (wl.get("ablation") is None or isinstance(wl.get("ablation"), str)) \
        and isinstance(wl.get("sets"), list) and all(isinstance(x, str) for x in wl["sets"])
    if not ok:
        raise UserError(f"{where}: \"workload\" needs \"config\" (a string), \"ablation\" (a "
                        f"string or null) and \"sets\" (a list of strings), got {wl!r}")


def _check_metric(where: str, name: str, m) -> None:
    """Every field of a metric that the drift code reads: ratio (positive), direction, mark, and low
    / high / se where present (positive numbers, se non-negative, or null)."""
    ratio = m.get("ratio") if isinstance(m, dict) else None
    if not _positive(ratio):
        raise UserError(f"{where}: metric {name!r} needs a positive \"ratio\" (new / old), got "
                        f"{m!r}")
    if m.get("direction") not in DIRECTIONS:
        raise UserError(f"{where}: metric {name!r} needs \"direction\": one of "
                        f"{', '.join(DIRECTIONS)}; got {m.get('direction')!r}")
    if not isinstance(m.get("mark"), str):
        raise UserError(f"{where}: metric {name!r} needs \"mark\" (the A/B's word: worse, better, "
                        f"not significant, ...); got {m.get('mark')!r}")
    for key in ("low", "high"):
        if m.get(key) is not None and not _positive(m[key]):
            raise UserError(f"{where}: metric {name!r}: \"{key}\" must be a positive ratio or "
                            f"null, got {m[key]!r}")
    se = m.get("se")
    if se is not None and not (_number(se) and se >= 0):
        raise UserError(f"{where}: metric {name!r}: \"se\" must be a non-negative number or null, "
                        f"got {se!r}")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _positive(v) -> bool:
    return _number(v) and v > 0
