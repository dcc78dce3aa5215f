"""`rlbench report RUN --markdown`: the run's tables as GitHub markdown, under a header that says
where they came from (the command, the config file, the machine, the date, the code), so that a
table in docs/results/ is pasted from this output rather than typed.

Sections, each where the run has it: the verdict (reports/verdict_text.py), the summary's headline
columns (the terminal's --wide table), the speedups measured vs predicted with their attribution to
device split and overlap, each experiment's section (a regime map, a families ladder: from the
records it is given) and the time-to-accuracy table. Everything is computed by analysis
and the experiments' analyses; this module renders. Nothing is written into the run folder.
"""
from __future__ import annotations

from pathlib import Path

from rlbench.analysis.accuracy_table import accuracy_frame
from rlbench.analysis.data import RunData, load, merge
from rlbench.analysis.origin import Origin, device_text, origin, overrides_of
from rlbench.analysis.seeds import cell_summary, is_multi_seed
from rlbench.analysis.speedup import attribution, speedup_frame
from rlbench.analysis.verdict import verdict_of
from rlbench.reports import accuracy_html as accuracy
from rlbench.reports.verdict_text import verdict_markdown
from rlbench.reports.tables import (COMPACT_HEAD, SPEEDUP_HEAD, attribution_text, compact_rows,
                                    speedup_rows)
from rlbench.reports.tables import markdown_table as table

NOT_RECORDED = "not recorded"


def markdown_report(run_dir, add=(), experiments=()) -> str:
    """The markdown text of run_dir (with the cells of the `add` folders): header, then the tables,
    with the sections of the experiments (ExperimentSpec records) whose run it is."""
    base, others = load(run_dir), [load(p) for p in add]
    run = merge(base, others) if others else base
    title = (f"{base.path.name} (`--ablation {base.name}`)" if base.kind == "ablation"
             else base.path.name)
    parts = [f"## {title}\n", *header_lines(base)]
    for other in others:
        parts += ["", f"Cells added from `{other.path}`:", *header_lines(other)]
    multi = is_multi_seed(run)
    summary, sp = cell_summary(run), cell_summary(run, speedup_frame, [])
    parts += ["", "### Verdict", "",
              *verdict_markdown(run, verdict_of(run, sp, summary, experiments))]
    parts += ["", "### Summary" + (" (median over seeds)" if multi else ""), "",
              table(COMPACT_HEAD, compact_rows(summary))]
    if len(sp):
        parts += ["", "### Speedup: measured vs predicted (TPSPD over the reference cell's)", "",
                  table(SPEEDUP_HEAD, speedup_rows(sp)),
                  *[f"- {t}" for t in attribution_text(attribution(sp))]]
    # each experiment's section where the run is its (a regime map, ...)
    for r in (e.load_report() for e in experiments):
        parts += r.markdown(run, sp)
    acc = accuracy_frame(run)
    if len(acc):
        parts += ["", "### Accuracy", "", table(accuracy.head(acc), accuracy.text_rows(acc)), "",
                  accuracy.explanation(acc)]
    return "\n".join(parts) + "\n"


def header_lines(run: RunData) -> list[str]:
    """The header block of one run folder, one `- label: value` line each."""
    o: Origin = origin(run)
    command = (f"`{o.command}`" if o.command
               else f"{NOT_RECORDED} (the run predates its record in ablation.json)")
    config = f"`{o.config_file}`" if o.config_file else \
        f"{NOT_RECORDED} (the resolved config is in every cell's results.json)"
    sets = overrides_of(run)
    if sets and not o.command:
        config += " with " + " ".join(f"`--set {s}`" for s in sets)
    m = o.machine
    machine = (f"{m.get('cpu_model') or 'CPU model unknown'}, {m.get('cores')} of "
               f"{m.get('logical_cpus')} cores usable")
    machine += ", recorded by the run" if o.machine_recorded else \
        f" ({NOT_RECORDED} by the run: this machine, read from /proc/cpuinfo at report time)"
    code = ", ".join(f"{k} {v}"
                     for k, v in [("commit", o.git_commit), ("code digest", o.code_digest),
                                              *o.versions.items()] if v) or NOT_RECORDED
    return [f"- Command: {command}", f"- Config file: {config}", f"- Machine: {machine}",
            f"- Device: {device_text(o.device) or NOT_RECORDED}", f"- Date: {_date(o)}",
            f"- Code: {code}", f"- Run folder: `{Path(o.run_dir)}`"]


def _date(o: Origin) -> str:
    if not o.created:
        return NOT_RECORDED
    return o.created + (" (run start)" if o.command else " (the first cell's provenance)")

