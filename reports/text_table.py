"""Tables and prose that fit a window: aligned plain-text columns, a table wider than the window
split into blocks that each repeat its first column, and prose wrapped to the same width. The
terminal uses them at WIDTH characters; report.html splits its tables by the same rule
(reports/html.py)."""
from __future__ import annotations

import math
import textwrap

WIDTH = 100  # characters: the default terminal output fits a 100-column window
GAP = 2  # spaces between columns


def aligned(rows: list[list[str]]) -> list[str]:
    """rows[0] is the head: the columns left-aligned, a rule of dashes under the head."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [(" " * GAP).join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, (" " * GAP).join("-" * w for w in widths))
    return lines


def column_groups(widths: list[int], width: int, gap: int = GAP) -> list[list[int]]:
    """Column indices in consecutive groups, each led by column 0, so that every group's widths
    (plus the gaps between them) stay within width where one column beside the first can; one group
    if all fit."""
    groups, current = [], [0]
    for i in range(1, len(widths)):
        used = sum(widths[j] for j in current) + gap * len(current)
        if len(current) > 1 and used + widths[i] > width:
            groups.append(current)
            current = [0]
        current.append(i)
    return groups + [current]


def fit(head: list[str], rows: list[list[str]], width: int = WIDTH) -> list[str]:
    """An aligned table within width characters: split into blocks (a blank line between them) that
    each repeat the first column, where the whole table is wider."""
    every = [head] + rows
    widths = [max(len(r[i]) for r in every) for i in range(len(head))]
    out: list[str] = []
    for group in column_groups(widths, width):
        out += ([""] if out else []) + aligned([[r[i] for i in group] for r in every])
    return out


def wrap(text: str, width: int = WIDTH, indent: str = "") -> list[str]:
    """A paragraph as lines of at most width characters (a word longer than that stays whole)."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [indent.rstrip()]


def x(v) -> str:
    """A ratio as text: '0.67×', 'n/a' where missing."""
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}×"
