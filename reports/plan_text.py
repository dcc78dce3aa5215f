"""`rlbench plan`'s terminal output (render only; the numbers come from bench/plan/command.py
run_plan): the verdict, the schedules' table and the TPSPD by split, each within 100 columns, then
the assumptions with their sources, what was read, the model's check against the log and the
ladder."""
from __future__ import annotations

from rlbench.reports.text_table import fit, wrap, x

SHORT = {"barrier": "barrier", "periodic": "periodic", "one-step": "1-off", "bounded": "k>1",
         "partial": "k=1+partial"}  # by a row's kind (analysis/plan.py)


def _interval(p: dict) -> str:
    if p.get("low") is None or p.get("high") is None:
        return "n/a"
    return f"{p['low']:.2f}–{p['high']:.2f}×"


def _split(p: dict) -> str:
    if p["devices"] < p["rollout_devices"] + p["train_devices"]:
        return f"{p['rollout_devices']}+{p['train_devices']} on {p['devices']}"
    return f"{p['rollout_devices']}+{p['train_devices']}"


def verdict(result: dict) -> str:
    """One line (wrapped): the best schedule, its split and speedup with interval, and periodic
    asynchrony's."""
    best, n = result["best"], result["devices"]
    pa = next((p for p in result["rows"] if p.get("kind") == "periodic" and "tri_model_of"
               not in p), None)
    text = (f"Plan: on {n} device{'s' if n > 1 else ''}, {best['label']} on {_split(best)} "
            f"(rollout+training) is predicted {x(best['speedup'])} the sync run's TPSPD "
            f"({_interval(best)}): {best['outcome']}.")
    if pa and pa is not best:
        text += (f" Periodic asynchrony (on-policy) on {_split(pa)}: {x(pa['speedup'])} "
                 f"({_interval(pa)}): {pa['outcome']}.")
    return "\n".join(wrap(text))


def table(result: dict) -> list[str]:
    head = ["schedule", "best split", "pred. TPSPD", "vs sync", "95% interval", "verdict"]
    body = [[p["label"], _split(p), f"{p['tpspd']:.1f}", x(p["speedup"]), _interval(p),
             p["outcome"] or ""]
            for p in result["rows"]]
    return fit(head, body)


def by_split(result: dict) -> list[str]:
    """Predicted TPSPD of each schedule at each swept rollout-pool size."""
    rows = result["rows"]
    head = ["rollout+training"] + ["+tri-model" if p.get("tri_model_of") else
                                   SHORT.get(p.get("kind"), p["label"])
                                   for p in rows]
    curves = [{c["rollout_devices"]: c for c in p["curve"]} for p in rows]
    body = []
    for r in sorted(curves[0]):
        c = curves[0][r]
        body.append([f"{r}+{c['train_devices']}"]
                    + [f"{cv[r]['tpspd']:.1f}" if r in cv else "" for cv in curves])
    return fit(head, body)


def assumptions(result: dict) -> list[str]:
    if not result["assumptions"]:
        return wrap("Assumptions: none; every cost is measured in the run (decode steps by their "
                    "bucket and cache window, each response's length, training work, weight sync).")
    lines = ["Assumptions (value, range, source):"]
    for a in result["assumptions"]:
        lines += wrap(f"{a['name']}: {a['value']:.3g} ({a['low']:.3g}–{a['high']:.3g}), "
                      f"{a['source']}: {a['why']}",
                      indent="  ")
    return lines + widest(result)


def widest(result: dict) -> list[str]:
    """The assumption whose range moves the best schedule's prediction most, and how to state it
    instead."""
    effects = result["best"].get("assumption_effects") or {}
    by_name = {a["name"]: a for a in result["assumptions"]}
    moved = [(hi / lo, name, lo, hi) for name, (lo, hi) in effects.items()
             if lo > 0 and hi / lo > 1.05 and by_name.get(name, {}).get("key")]
    if not moved:
        return []
    _, name, lo, hi = max(moved)
    return wrap(f"Widest: {name} moves the best schedule's prediction {x(lo)}–{x(hi)} across its "
                f"range; a value you measured narrows it: --assume {by_name[name]['key']}=VALUE.")


def paragraphs(result: dict) -> list[str]:
    """What was read, the notes, the model's check and the ladder: one paragraph each, unwrapped."""
    used = result["steps_used"]
    out = [f"Read {result['log']} ({result['format']}): steps {used[0]}–{used[1]} ({used[2]} used)"
           + (f", warm-up dropped: {', '.join(map(str, result['warmup_dropped']))}"
              if result["warmup_dropped"] else "")
           + f"; keys: {', '.join(result['keys'])}."]
    out += [f"Note: {note}" for note in result["notes"]]
    c = result["model_check"]
    if c["error"] is not None:
        out.append(f"Model check: sync predicted {c['predicted_tpspd']:.1f} TPSPD from the same "
                   f"steps, {'logged' if result['format'] != 'rlbench' else 'measured'} "
                   f"{c['reference_tpspd']:.1f} ({100 * c['error']:+.1f}%).")
    if result.get("ladder"):
        lad = dict(result["ladder"])
        tri = lad.pop("tri-model", None)
        text = "Ladder (predicted, each rung over the one before): " + " × ".join(
            f"{k} {x(v)}"
            for k, v in lad.items()) + f" = {x(result['ladder_product'])} over the predicted sync"
        out.append(text + (f"; without the old-log-prob pass the best schedule gains {x(tri)}."
                           if tri else "."))
    return out


def provenance(result: dict) -> list[str]:
    return [line for p in paragraphs(result) for line in wrap(p)]


def format_text(result: dict) -> str:
    parts = [verdict(result), "\n".join(table(result)),
             "Predicted TPSPD by split:\n" + "\n".join(by_split(result)),
             "\n".join(assumptions(result)), "\n".join(provenance(result))]
    return "\n\n".join(parts)
