"""`rlbench check --record FILE`: a passing A/B appended to the history (bench/check/history.py),
then the drift over it judged (bench/check/drift.py); `--against anchor` measures the tree against
the history's anchor commit directly, and `--anchor-every K` makes that A/B by itself every K steps
or when a change point lands, so a drift is confirmed on one machine in one run before the check
fails on it.

A step is recorded only when its A/B passes (the history holds accepted results), or with
--reanchor, whatever its verdict: the A/B of a move of ACCEPTED that changes performance on purpose,
which starts every series anew at its new commit (history.chain_of); an A/B against the anchor is
recorded whatever its verdict (it is a measurement of the drift, not a step).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlbench.check import against as ab, drift, history, history_text
from rlbench.core.errors import UserError
from rlbench.core.results.provenance import source_root

ANCHOR = "anchor"  # `--against anchor`: the history's anchor commit of this workload


@dataclass
class Recording:
    path: Path  # the history file (created by the first entry)
    last_n: int = drift.LAST_N  # a change point among the last N steps fails the check
    # make an A/B against the anchor every K steps, or at a change point (0: never)
    anchor_every: int = 0
    # this step's change of performance is intended: recorded whatever its verdict, the
    reanchor: bool = False
    # series start anew at its new commit


def anchor_ref(recording: Recording | None, config: Path | None, ablation: str,
               sets: list[str]) -> str:
    """The sha `--against anchor` names: the anchor of this workload in the history."""
    if recording is None:
        raise UserError("--against anchor needs --record FILE: the history whose anchor commit to "
                        "run")
    config = Path(config or source_root() / "configs" / "ci-ab.yaml").resolve()
    wl = history.workload({"config": str(config), "ablation": ablation, "sets": sets})
    anchor, _ = history.anchor_of(history.read(recording.path), wl)
    if anchor is None:
        raise UserError(f"--against anchor: {recording.path} has no step of this workload "
                        f"({wl['config']}, --ablation {ablation}) yet, so no anchor")
    return anchor


def _kind(record: dict) -> str:
    return "anchor" if str(record.get("against") or "").startswith(ANCHOR) else "step"


def record_and_judge(recording: Recording, ab_dir: Path, result, confirmed_by: Path | None,
                     one_run=None,
                     echo=print) -> int:
    """Append the A/B (its combined verdict where a second run confirmed it) to the history, then
    judge the drift; one_run(ref) -> a new A/B folder, for the anchor A/B (None: judging folders, no
    new run). -> 1 when a drift fails the check, else 0."""
    record = json.loads((Path(ab_dir) / ab.AB_FILE).read_text())
    kind = _kind(record)
    if kind == "step" and result.exit_code and not recording.reanchor:
        echo(f"not recorded in {recording.path}: the A/B failed (the history keeps accepted "
             "results; a move of ACCEPTED that changes performance on purpose is recorded with "
             "--reanchor)")
        return 0
    new = history.entry(kind, {**record, "folder": str(Path(ab_dir).resolve())}, result,
                        str(Path(confirmed_by).resolve()) if confirmed_by else None,
                        recording.reanchor)
    line = history.append(recording.path, new)
    echo(f"recorded: {recording.path}:{line} ({kind}, {len(new['metrics'])} metrics, "
         f"{new['old_commit'][:10]} -> {new['new_commit'][:10]})")
    entries, wl = history.read(recording.path), new["workload"]
    verdict = drift.judge(entries, wl, recording.last_n)
    due = drift.steps_since_anchor_ab(entries, wl) >= recording.anchor_every > 0
    wanted = verdict.failures or verdict.suspected  # a change point: the anchor A/B decides it now
    if kind == "step" and one_run is not None and recording.anchor_every and (wanted or due):
        anchor, _ = history.anchor_of(entries, wl)
        echo(f"rlbench check: an A/B against the anchor {anchor[:10]} "
             f"({'to confirm the drift' if wanted else f'every {recording.anchor_every} steps'})")
        anchor_dir = one_run(f"{ANCHOR}:{anchor}")
        anchor_result = ab.judge(anchor_dir)
        history.append(recording.path,
                       history.entry("anchor", {**json.loads((anchor_dir / ab.AB_FILE).read_text()),
                                                               "folder": str(anchor_dir.resolve())},
                                     anchor_result))
        entries = history.read(recording.path)
        verdict = drift.judge(entries, wl, recording.last_n)
    echo(history_text.format_drift(verdict, recording.path, history.anchor_of(entries, wl)[0]))
    return verdict.exit_code
