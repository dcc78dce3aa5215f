"""The verdict in words (computed by analysis/verdict.py): one short block per periodic-async cell,
then what would change the answer. The terminal prints it first, summary.md and report.html open
with it.

    periodic_async 0.67× sync's TPSPD (95% interval 0.62–0.71× over 17 iterations; predicted 0.69×):
    loses here. The sync cell spends 17% of its iteration generating; the device split costs 0.65×,
    overlap gives back 1.03×.
"""
from __future__ import annotations

import re

from rlbench.analysis.data import RunData
from rlbench.analysis.intervals import Ratio, described
from rlbench.analysis.verdict import Comparison, Verdict
from rlbench.reports.html import esc
from rlbench.reports.text_table import WIDTH, wrap, x

TITLE = "Verdict"
HINT = ("What would change it: `rlbench run --ablation regime` maps where periodic asynchrony pays "
        "on this machine, `--ablation families` what each step beyond it adds.")


SAID = {"wins": "wins here", "loses": "loses here", "even": "even here",
        "too few": "too few iterations to call",
        "not called": "not called (`--set run.interleave=true` calls it)"}


def even_why(r: Ratio) -> str:
    """Why a ratio is called even: its interval includes 1."""
    return ": the interval includes 1"


def comparison_sentence(c: Comparison) -> str:
    """'periodic_async 0.67× sync's TPSPD (95% interval 0.62–0.71× over 17 iterations; predicted
    0.69×): loses here. The sync cell spends 17% of its iteration generating; the device split costs
    0.65×, overlap gives back 1.03×.'"""
    if c.measured is None:
        return f"{c.async_cell}: no measured TPSPD to set against {c.sync_cell}'s."
    said = SAID[c.outcome] + (even_why(c.interval) if c.outcome == "even" else "")
    predicted = f"predicted {x(c.predicted)}" + (" for the schedule alone: no sync cell ran with "
                                                 "its optimisations"
                                                 if c.schedule_only else "")
    head = (f"{c.async_cell} {x(c.measured)} {c.sync_cell}'s TPSPD ({described(c.interval)}; "
            f"{predicted}): {said}.")
    share = [] if c.rollout_share is None else [f"the sync cell spends "
                                                f"{100 * c.rollout_share:.0f}% of its "
                                                "iteration generating"]
    factors = []
    if c.split is not None:
        factors.append(f"the device split {'costs' if c.split < 1 else 'gives'} {x(c.split)}")
    if c.overlap is not None:
        after_a_cost = c.split is not None and c.split < 1
        word = ("gives back" if after_a_cost else "adds") if c.overlap >= 1 else \
            ("costs a further" if after_a_cost else "costs")
        factors.append(f"overlap {word} {x(c.overlap)}")
    why = "; ".join(share + ([", ".join(factors)] if factors else []))
    return f"{head} {why[0].upper()}{why[1:]}." if why else head


def _fastest(f: tuple[str, float, str]) -> str:
    """The fastest cell by median TPSPD, the reference itself where every other cell is slower."""
    cell, speedup, ref = f
    if speedup < 1:
        return f"{ref} is the fastest cell (the next, {cell}, {x(speedup)} its TPSPD)"
    return f"fastest cell: {cell}, {x(speedup)} {ref}'s TPSPD"


def verdict_sentences(run: RunData, v: Verdict) -> list[str]:
    """Every sentence of the verdict, unwrapped: the comparisons, then what would change the
    answer."""
    out = [comparison_sentence(c) for c in v.comparisons]
    if not v.comparisons:
        out.append(f"No periodic-async cell beside a sync cell in this run; {_fastest(v.fastest)}."
                   if v.fastest
                   else "No periodic-async cell beside a sync cell in this run.")
    # what the run holds (rlbench beside a real framework: where the difference comes from)
    for e in v.experiments:
        out += e.load_report().notes(run)
    said = [e.load_report().change(v.answers[e.name]) for e in v.experiments
            # each experiment's answer, in registry order (a regime map's crossover, ...)
            if e.name in v.answers]
    change = [s for s in said if s]
    return out + (change or ([HINT] if v.comparisons else []))


def verdict_lines(run: RunData, v: Verdict, width: int = WIDTH) -> list[str]:
    """The terminal's block: 'Verdict:', then each sentence wrapped within width, indented."""
    out = [f"{TITLE}:"]
    for s in verdict_sentences(run, v):
        out += wrap(s, width, indent="  ")
    return out


def verdict_html(run: RunData, v: Verdict) -> str:
    """The report's first section: a paragraph a sentence, `code` as <code>."""
    paragraphs = (re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(s))
                  for s in verdict_sentences(run, v))
    return '<div class="verdict">' + "".join(f"<p>{p}</p>" for p in paragraphs) + "</div>"


def verdict_markdown(run: RunData, v: Verdict) -> list[str]:
    return [f"- {s}" for s in verdict_sentences(run, v)]
