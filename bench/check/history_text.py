"""The history's words (`rlbench history`, `rlbench check --record`): first the answer, one line per
workload (unchanged since the anchor, drift suspected, or a regression), then the detail below it:
the chain (its anchor, re-anchorings and any step left out, each named), Otava's change points, the
A/Bs against the anchor and when the next is due. Computed in bench/check/drift.py and history.py;
rendered here."""
from __future__ import annotations

import math

from rlbench.check import drift, history
from rlbench.check.drift import ANCHOR_EVERY, LAST_N, ChangePoint, Drift


def describe(cp: ChangePoint) -> str:
    """A drift: 'cost:update +9.4% since 1a2b3c4d5e (+1.5% a step over 6 steps, 7.3 sd; level 1.000
    -> 1.094 of the anchor)'; an Otava split: 'cost:update +8.9% at 1a2b3c4d5e (p=0.0004, 3 steps
    ago; level ...)'."""
    # no change point: what an A/B against the anchor measured (drift._direct)
    if math.isnan(cp.pvalue):
        return f"{cp.metric} {cp.size:+.1%} at {cp.commit[:10]} against the anchor"
    level = f"level {cp.before:.3f} -> {cp.after:.3f} of the anchor"
    if cp.slope is not None:
        steps = f"{cp.steps_ago} step{'s' * (cp.steps_ago != 1)}"
        return (f"{cp.metric} {cp.size:+.1%} since {cp.since[:10]} ({math.exp(cp.slope) - 1:+.1%} "
                f"a step over {steps}, {cp.z:.1f} sd; {level})")
    return (f"{cp.metric} {cp.size:+.1%} at {cp.commit[:10]} (p={cp.pvalue:.2g}, {cp.steps_ago} "
            f"step{'s' * (cp.steps_ago != 1)} ago; {level})")


def format_drift(res: Drift, path, anchor: str | None) -> str:
    """The lines `rlbench check --record` prints after the per-step verdict."""
    if not res.failures and not res.cleared and not res.suspected:
        return f"drift: none among the last steps of {path} (anchor {str(anchor)[:10]})"
    lines = []
    if res.failures:
        lines.append(f"DRIFT: {len(res.failures)} regression(s) in {path} against anchor "
                     f"{str(anchor)[:10]}:")
        lines += [f"  {describe(cp)}; {said}" for cp, said in res.failures]
    if res.suspected:
        lines.append(f"drift suspected in {path}, not failing: an A/B against the anchor "
                     f"{str(anchor)[:10]} is due now:")
        lines += [f"  {describe(cp)}; {said}" for cp, said in res.suspected]
    if res.cleared:
        lines.append("drift not confirmed by the anchor A/B (the chain's noise):")
        lines += [f"  {describe(cp)}; {said}" for cp, said in res.cleared]
    return "\n".join(lines)


def title(wl: dict) -> str:
    """A workload as its command would name it; an A/B of environments or configs names its kind and
    engine."""
    peer = wl.get("engine", "rlbench") != "rlbench"
    cells = f"--engine {wl['engine']}" if peer else f"--ablation {wl['ablation']}"
    kind = {"env": " (environments A/B)", "config": " (configs A/B)"}.get(wl.get("mode"), "")
    return (f"{wl['config']} {cells}{''.join(' --set ' + s for s in wl['sets'])}"
            f"{''.join(' --set-b ' + s for s in wl.get('sets_b') or [])}{kind}")


def answer(entries: list[dict], wl: dict, last_n: int = LAST_N) -> list[str]:
    """The first screen's lines for a workload: its verdict, each regression or suspected drift
    named."""
    res, c = drift.judge(entries, wl, last_n), history.chain_of(entries, wl)
    steps = len(c.steps)
    head = f"{title(wl)}: "
    if res.failures:
        return [head + "REGRESSION in "
                + ", ".join(dict.fromkeys(_short(cp) for cp, _ in res.failures))] + \
            [f"  {describe(cp)}; {said}" for cp, said in res.failures] + \
            [f"  also suspected: {describe(cp)}" for cp, _ in res.suspected]
    if res.suspected:
        return [head + "drift suspected in " + ", ".join(_short(cp) for cp, _ in res.suspected)] + \
            [f"  {describe(cp)}; {said}" for cp, said in res.suspected]
    cleared = f"; {len(res.cleared)} drift(s) cleared by the anchor A/B" if res.cleared else ""
    return [head
            + f"unchanged since {str(c.anchor)[:10]} ({steps} step{'s' * (steps != 1)}){cleared}"]


def _short(cp: ChangePoint) -> str:
    """'cost:update (+9.4% since 1a2b3c4d5e)', or against the anchor where an anchor A/B measured
    it."""
    return f"{cp.metric} ({cp.size:+.1%} " + (f"since {cp.since[:10]})" if cp.since
                                              else "against the anchor)")


def detail(entries: list[dict], wl: dict, path, anchor_every: int = ANCHOR_EVERY) -> list[str]:
    """A workload's detail: its chain, change points, anchor A/Bs, and the anchor A/B when due."""
    c = history.chain_of(entries, wl)
    out = [f"workload {title(wl)}: anchor {str(c.anchor)[:10]}, {len(c.steps)} step(s) chained to "
           f"it"]
    out += [f"  {what}" for _, what in c.moves] + [f"  {why}" for _, why in c.off]
    cps = drift.all_change_points(entries, wl)
    counted = [cp for cp in cps if cp.counts]
    out.append(f"  change points (Otava, p < {drift.MAX_PVALUE:g}): {len(cps) or 'none'}"
               + (f", {len(cps) - len(counted)} of them within the floor or the noise" if len(cps)
                  > len(counted) else ""))
    out += [f"    {label(cp)} {describe(cp)}" for cp in counted]
    for i, e in history.same_workload(entries, wl):
        if e["kind"] != "anchor":
            continue
        worse = ", ".join(f"{n} {m['ratio'] - 1:+.1%}" for n, m in e["metrics"].items()
                          if m["mark"] == "worse")
        former = "" if e["old_commit"] == c.anchor else " (a former anchor: not judged)"
        out.append(f"  anchor A/B entry {i + 1} ({e['date'][:10]}, {e['new_commit'][:10]} against "
                   f"{e['old_commit'][:10]}{former}): {worse or 'nothing flagged'}")
    due = drift.steps_since_anchor_ab(entries, wl)
    if c.anchor and due >= anchor_every:
        out.append(f"  an A/B against the anchor is due ({due} steps since the last): "
                   f"rlbench check --against anchor --record {path}")
    return out


def format_history(entries: list[dict], path, last_n: int = LAST_N,
                   anchor_every: int = ANCHOR_EVERY) -> str:
    """`rlbench history FILE`: the answer per workload first, then the detail."""
    if not entries:
        return (
            f"{path}: no entries yet (`rlbench check --record {path}` appends one per passing A/B)"
        )
    wls = drift.workloads(entries)
    first = [line for wl in wls for line in answer(entries, wl, last_n)]
    rest = [line for wl in wls for line in detail(entries, wl, path, anchor_every)]
    return "\n".join(first + ["", "Detail:"] + rest)


def label(cp: ChangePoint) -> str:
    """regression / improvement where the move counts (beyond the floor and the chain's noise), else
    small."""
    return ("REGRESSION" if cp.bad
            else "improvement") if cp.counts else "(within the floor or the noise)"
