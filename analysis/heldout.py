"""Seen-fact and held-out-fact accuracy (`data.split: fact`, engines/data/facts.py), for
summary.csv.

Under the fact split, every evaluation scores two sets: `accuracy` on problems whose every step is a
fact never trained on (held out), `accuracy_seen` on problems made of trained facts. Side by side
they tell memorisation (seen rises, held-out does not) from skill (both rise). Columns, first
(before) and last (after) evaluation, pass@1 in [0, 1]; the gain is after - before in the same unit.
"""
from __future__ import annotations

COLUMNS = ["accuracy_heldout_before", "accuracy_heldout_after", "accuracy_heldout_gain",
           "accuracy_seen_before", "accuracy_seen_after"]


def has_fact_split(cells) -> bool:
    """Whether any cell's evaluations carry the seen-fact score (the run used the fact split)."""
    return any("accuracy_seen" in ev for c in cells for ev in (c.result.get("evals") or []))


def heldout_columns(c) -> dict:
    """The COLUMNS of one cell (None where it has no fact-split evaluation)."""
    evals = [ev for ev in (c.result.get("evals") or []) if "accuracy_seen" in ev]
    if not evals:
        return dict.fromkeys(COLUMNS)
    first, last = evals[0], evals[-1]
    return {"accuracy_heldout_before": first["accuracy"],
            "accuracy_heldout_after": last["accuracy"],
            "accuracy_heldout_gain": last["accuracy"] - first["accuracy"],
            "accuracy_seen_before": first["accuracy_seen"],
            "accuracy_seen_after": last["accuracy_seen"]}
