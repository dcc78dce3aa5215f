"""A flagged A/B run confirmed by a second one with fresh processes (`rlbench check --against`,
`--confirm`).

Every process of each tree carries an offset of its own (memory layout, which core), constant over
its run, which no statistic inside one run can see; the floor of bench/check/ab.py covers it on the
machine it was measured on. On another CPU type an offset can reach the floor (CI, 2026-11:
cost:rollout +6.0% with no change to the rollout code). A second A/B run starts new processes, so
their offsets are drawn afresh, while a change of code moves the metric again. So when the first
run's only failures are paired performance metrics (judged against noise), a second run is made, and
a paired metric is a regression only when both runs flag it. Everything else fails at once: a cell
of the new tree that did not complete, a metric it lost, accuracy, an invariant (these do not depend
on which process ran).
"""
from __future__ import annotations

from rlbench.check.verdicts import CheckResult, Row, format_check

CONFIRM_NOTE = "flagged in the first A/B run; the second run (fresh processes) decides"


def needs_confirmation(first: CheckResult) -> bool:
    """True when the first run failed and every failure is a paired performance metric."""
    worse = [r for r in first.rows if r.mark == "worse"]
    return bool(worse) and all(r.paired for r in worse)


def combine(first: CheckResult, second: CheckResult) -> CheckResult:
    """The verdict of two A/B runs: the second run's rows, a paired metric worse only where both
    runs flag it; any other failure of either run stands (a cell of the first run that did not
    complete is not cleared by a second run that completed)."""
    flagged = {r.metric: r for r in first.rows if r.mark == "worse"}
    res = CheckResult(second.run_dir, second.baseline_path,
                      baseline_info=dict(second.baseline_info))
    confirmed, cleared = [], []
    for r in second.rows:
        row = Row(**vars(r))
        if r.paired and r.metric in flagged:
            (confirmed if r.mark == "worse" else cleared).append((flagged[r.metric], r))
        elif r.paired and r.mark == "worse":
            row.mark = "not significant"
            row.note = (f"flagged in the second A/B run only, not in the first: not confirmed; "
                        f"{r.note}")
            cleared.append((None, r))
        res.rows.append(row)
    res.rows += _first_run_failures(first, res.rows)
    res.exit_code = int(any(r.mark == "worse" for r in res.rows))
    lines = [f"  {_twice(a, b)}" for a, b in confirmed]
    twice = {b.metric for _, b in confirmed}
    others = [r for r in res.rows if r.mark == "worse" and r.metric not in twice]
    if res.exit_code:
        res.verdict = (f"FAIL: {len(confirmed) + len(others)} regression(s)"
                       + (", confirmed by a second A/B run with fresh processes" if confirmed
                          else "") + ":\n"
                       + "\n".join(lines + [f"  {_once(r)}" for r in others]))
    else:
        res.verdict = "PASS: nothing flagged by both A/B runs" + (
            "; " + "; ".join(_not_confirmed(a, b) for a, b in cleared)
            + " (a per-process offset, not a change of code: bench/baselines/README.md)" if cleared
            else "")
    return res


def _first_run_failures(first: CheckResult, rows: list[Row]) -> list[Row]:
    """The first run's failures that no statistic judged (a cell that did not complete, a lost
    metric, accuracy, an invariant), as rows of their own where the second run's row of that metric
    passed."""
    worse = {r.metric for r in rows if r.mark == "worse"}
    out = []
    for r in first.rows:
        if r.mark == "worse" and not r.paired and r.metric not in worse:
            row = Row(**vars(r))
            row.metric, row.note = (f"{r.metric} (first A/B run)",
                                    f"failed in the first A/B run; {r.note}".rstrip("; "))
            out.append(row)
    return out


def _pct(r: Row | None) -> str:
    if r is None or r.change is None:
        return "not flagged"
    ci = f" [{r.ci[0]:+.1%}, {r.ci[1]:+.1%}]" if r.ci else ""
    return f"{r.change:+.1%}{ci}"


def _twice(a: Row, b: Row) -> str:
    return f"{b.metric}: {_pct(a)} in the first run, {_pct(b)} in the second" + (
        f": {b.description}" if b.description else "")


def _once(r: Row) -> str:
    return f"{r.metric} {_pct(r) if r.change is not None else r.current}" + (f": {r.note}"
                                                                             if r.note else "")


def _not_confirmed(a: Row | None, b: Row) -> str:
    if a is None:
        return f"{b.metric} flagged only in the second run ({_pct(b)})"
    return (
        f"{b.metric} flagged in the first run ({_pct(a)}), {_pct(b)} in the second (within its flag"
        " line)"
    )


def format_confirmed(first: CheckResult, second: CheckResult, final: CheckResult) -> str:
    """What differs between the sides and moved in both runs (an A/B of environments or configs),
    both runs' tables, then the combined verdict."""
    return "\n".join([*(final.baseline_info.get("head") or []),
                      format_check(first, verdict=False, head=False),
                      f"first run: {first.verdict.splitlines()[0]}", "",
                      "second A/B run (fresh processes), to confirm:",
                      format_check(second, verdict=False, head=False),
                      f"second run: {second.verdict.splitlines()[0]}", "", final.verdict])
