"""`rlbench compare`: two runs' key metrics side by side (rlbench.analysis.comparison), as markdown;
with the verdicts across every run given (rlbench.analysis.reruns): do repeated runs say the same
thing?"""
from __future__ import annotations

import math

import pandas as pd
from rlbench.analysis import comparison, reruns
from rlbench.analysis.data import load
from rlbench.analysis.intervals import described
from rlbench.reports.tables import to_markdown
from rlbench.reports.text_table import wrap


def compare(run_a, run_b, *more) -> tuple[pd.DataFrame, str]:
    """-> (the long table of every run given, its text: which runs, how cells were matched, the
    table in markdown, then the verdicts across all the runs)."""
    df, about = comparison.compare(run_a, run_b, *more)
    text = f"{about}\n\n{to_markdown(df)}"
    cells = reruns.across([load(r) for r in (run_a, run_b, *more)])
    if cells:
        text += "\n\n" + "\n".join(across_text(cells, 2 + len(more)))
    return df, text


def across_text(cells: list[reruns.Across], runs: int) -> list[str]:
    """Per cell: each run's ratio, interval and word; whether the runs agree within their intervals;
    the pooled ratio."""
    out = [f"Verdicts across the {runs} runs (each cell's ratio over its reference in each run, "
           "its 95% interval and word):"]
    for a in cells:
        out.append(f"  {a.cell} / {a.reference}:")
        for i, r in enumerate(a.runs):
            word = r.ratio.outcome or "–"
            value = "–" if r.ratio.value is None else f"{r.ratio.value:.2f}×"
            out.append(f"    run {i + 1}: {value} ({described(r.ratio)}): {word}")
        out += ["    " + line for line in wrap(agreement(a))]
    return out


def agreement(a: reruns.Across) -> str:
    words = sorted({w or "–" for w in a.words})
    said = f"every run says {words[0]}" if len(words) == 1 else f"the runs say {', '.join(words)}"
    if a.q is None:
        return f"{said}; fewer than two runs with an interval: no test of their spread."
    test = (f"Welch's F {a.f:.2f} on {sum(r.se is not None for r in a.runs) - 1} and {a.df2:.1f} "
            f"df, p {a.p:.2f}")
    pooled = (f"together {a.pooled.value:.2f}× ({a.pooled.low:.2f}–{a.pooled.high:.2f}×): "
              f"{a.pooled.outcome}")
    if not a.differ:
        return f"{said}; the runs differ no more than their intervals allow ({test}); {pooled}."
    widened = ", ".join(w or "–" for w in a.widened_words)
    return (f"{said}; the runs differ by more than their intervals allow ({test}; between-run "
            f"standard deviation {100 * (math.exp(a.tau) - 1):.1f}%): one run's interval misses "
            f"it, so one run's word needs another run. Widened by it, the runs would say "
            f"{widened}; {pooled}.")
