""""Against a real framework": peers.csv (computed by analysis.py) as the terminal's lines, the
report's section and peers.md (REPORT is what the record names): the cells side by side (TPSPD, the
ratio to rlbench's sync, device-seconds and CPU-seconds per 1,000 trained tokens by stage,
accuracy), one sentence per peer cell saying where its difference to rlbench's sync comes from, and
the settings that differ between the engines (from each TRL cell's results.json)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from rlbench.analysis.data import RunData, read_table
from rlbench.analysis.intervals import described, from_columns, inverted
from rlbench.core.experiments.spec import Report
from rlbench.reports.html import esc, table
from rlbench.reports.tables import fmt
from rlbench.reports.text_table import fit

TITLE = "Against a real framework"
CSV = "peers.csv"
# stage -> its short column name (the terminal's table fits 100 columns)
STAGES = {"rollout": "rollout", "old_logprob": "old", "ref_logprob": "ref", "update": "update",
          "optimizer_step": "opt", "weight_sync": "wsync"}
HEAD = ["cell", "engine", "TPSPD median (min–max)", "vs sync (95% interval)",
        *[f"{short} s/ktok" for short in STAGES.values()], "other s/ktok", "total s/ktok",
        "max stale",
        "acc first→final", "status"]
SHORT_HEAD = ["cell", "TPSPD (min–max)", "vs sync", *STAGES.values(), "other", "total", "acc"]
CPU_HEAD = ["cell", *[f"{short} CPU s/ktok" for short in STAGES.values()], "CPU total s/ktok",
            "on core %",
            "tokens/iteration", "response mean"]
NOTE = ("Same devices, model, data, prompts per iteration, G, response cap, sampling, optimizer "
        "and loss (tests/unit/engines/test_trl_loss.py, tests/unit/engines/test_verl_loss.py); "
        "each engine generates its own samples. s/ktok: device-seconds per 1,000 trained tokens "
        "over the measured iterations, by stage (summed over workers; a stage that waits for "
        "another rank counts the wait: rlbench's optimizer_step holds the all-reduce, TRL's update "
        "its DDP all-reduce and metric reductions); other: device time in no stage (idle, and a "
        "peer's work outside rlbench's stage names); total = 1000 / TPSPD, pooled. CPU s/ktok: the "
        "same by the stages' own CPU seconds, which neither waiting nor another job on the core "
        "adds to; on core %: the share of the rollout and log-prob passes' wall time their workers "
        "were on a core (below 100: other processes took the cores while this cell ran). vs sync: "
        "TPSPD median over rlbench's sync; in brackets its 95% interval from the per-iteration "
        "ratios (iteration k of each cell ran back to back when the cells took turns; "
        "analysis/intervals.py): faster or slower only where it excludes 1.")


def read(run: RunData) -> pd.DataFrame | None:
    """peers.csv of the run folder (None where there is none: no peer framework's cell)."""
    return read_table(run.path / CSV)


def x(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _cells(r: dict, prefix: str = "") -> list[str]:
    return [fmt(r[f"{prefix}{s}_s_per_ktok"]) if r[f"{prefix}{s}_s_per_ktok"] else "–" for s
            in STAGES]


def _tpspd(r: dict) -> str:
    return "–" if r["tpspd_median"] is None else \
        f"{fmt(r['tpspd_median'])} ({fmt(r['tpspd_min'])}–{fmt(r['tpspd_max'])})"


def _interval(r: dict) -> str:
    ratio = from_columns(r, "vs_sync", "vs_sync")
    return "" if ratio.low is None else f" ({ratio.low:.2f}–{ratio.high:.2f})"


def _row(r: dict) -> list[str]:
    paired = _interval(r)
    how = ([] if r["steps_per_generation"] in (None,
                                               1)
           else [f"{r['steps_per_generation']} steps/generation"]) \
        + (["continuous batching"] if r.get("continuous_batching") is True else [])
    engine = r["engine"] + (f" ({', '.join(how)})" if how else "")
    return [r["cell"], engine, _tpspd(r), x(r["vs_sync"]) + paired, *_cells(r),
            fmt(r["other_s_per_ktok"]),
            fmt(r["total_s_per_ktok"]), fmt(r["staleness_max"]),
            f"{fmt(r['accuracy_first'])}→{fmt(r['accuracy_final'])}", str(r["status"])]


def _short_row(r: dict) -> list[str]:
    return [r["cell"], _tpspd(r), x(r["vs_sync"]), *_cells(r), fmt(r["other_s_per_ktok"]),
            fmt(r["total_s_per_ktok"]), f"{fmt(r['accuracy_first'])}→{fmt(r['accuracy_final'])}"]


def _cpu_row(r: dict) -> list[str]:
    on_core = "–" if r.get("on_cpu_pct") is None else f"{r['on_cpu_pct']:.0f}"
    return [r["cell"], *_cells(r, "cpu_"), fmt(r["cpu_total_s_per_ktok"]), on_core,
            fmt(r["tokens_per_iteration"]),
            fmt(r["response_len_mean"])]


THAN = {"wins": "faster than it", "loses": "slower than it", "even": "even with it",
        "too few": "not called (too few iterations)",
        "not called": "not called (the cells ran one after another)"}


def sentences(frame: pd.DataFrame) -> list[str]:
    """Per peer cell: rlbench's sync against it, with the 95% interval (faster or slower only where
    it excludes 1), and the stages that make the difference (the `<stage>_vs_sync` columns, largest
    first)."""
    sync = frame[frame["engine"] == "rlbench"].iloc[0]
    keys = [c[:-len("_vs_sync")] for c in frame.columns if c.endswith("_vs_sync") and c
            != "total_vs_sync"]
    out = []
    for r in frame[frame["engine"] != "rlbench"].to_dict("records"):
        diffs = sorted(((k, r[f"{k}_vs_sync"]) for k in keys if r[f"{k}_vs_sync"]),
                       key=lambda d: -abs(d[1]))
        if not r["vs_sync"] or not diffs or r["total_vs_sync"] is None:
            continue
        ours = inverted(from_columns(r, "vs_sync", "vs_sync"))  # sync over the peer cell
        than = THAN[ours.outcome] + (": the interval includes 1" if ours.outcome == "even" else "")
        parts = ", ".join(f"{k} {d:+.3f}" for k, d in diffs[:4])
        # its own pair's run
        against = r.get("against") if isinstance(r.get("against"), str) else sync["cell"]
        out.append(f"rlbench's {against} reaches {ours.value:.2f}× the TPSPD of {r['cell']} "
                   f"({described(ours)}): {than}. Per 1,000 tokens {r['cell']} spends "
                   f"{r['total_s_per_ktok']:.3f} device-s, {against} "
                   f"{r['total_s_per_ktok'] - r['total_vs_sync']:.3f} ({r['total_vs_sync']:+.3f}: "
                   f"{parts}).")
    ours = frame[frame["engine"] == "rlbench"].to_dict("records")
    if ours and ours[0].get("vs_peer"):
        out.append(f"TPSPD over {ours[0]['peer']}'s: "
                   + ", ".join(f"{r['cell']} {x(r['vs_peer'])}" for r in ours) + ".")
    return out


def differing_settings(run: RunData) -> tuple[list[list[str]], list[str]]:
    """The settings the engines cannot share, from each peer framework's first cell's results.json
    (a TRL cell names the peer's side `trl`), and the table's head."""
    rows, engines = [], []
    for c in run.cells:
        diffs = (c.result.get("external") or {}).get("differences")
        engine = c.switches.get("engine")
        if diffs and engine not in engines:
            engines.append(engine)
            rows += [[d["setting"], d["rlbench"], f"{engine}: {d.get('peer', d.get('trl'))}",
                      d["why"]]
                     for d in diffs]
    return rows, ["setting", "rlbench", "peer", "why"]


def peers_lines(run: RunData) -> list[str]:
    frame = read(run)
    if frame is None:
        return []
    rows = [_short_row(r) for r in frame.to_dict("records")]
    return ["", f"{TITLE} (device-s per 1,000 tokens by stage; every column: {CSV}, peers.md):",
            *fit(SHORT_HEAD, rows)]  # its sentences: the verdict's (notes)


def peers_section(run: RunData) -> tuple[str, str] | None:
    frame = read(run)
    if frame is None:
        return None
    records, (settings, settings_head) = frame.to_dict("records"), differing_settings(run)
    return TITLE, ("".join(f"<p><b>{esc(s)}</b></p>" for s in sentences(frame))
                   + table([_row(r) for r in records], HEAD) + table([_cpu_row(r) for r in records],
                                                                     CPU_HEAD)
                   + f"<p>{esc(NOTE)}</p>"
                   + ("<h3>Settings that differ between the engines</h3>"
                      + table(settings, settings_head) if settings else "")
                   + "<details><summary>Every column (peers.csv)</summary>"
                   + table([list(r) for r in frame.itertuples(index=False)],
                           list(frame.columns)) + "</details>")


def _md(rows: list[list[str]], head: list[str]) -> str:
    return "\n".join("| " + " | ".join(str(v).replace("|", "/") for v in r) + " |"
                     for r in [head, ["---"] * len(head), *rows])


def peers_markdown(run: RunData) -> str | None:
    """peers.md: the section as Markdown (docs/results/peers.md quotes it); None without
    peers.csv."""
    frame = read(run)
    if frame is None:
        return None
    records, (settings, settings_head) = frame.to_dict("records"), differing_settings(run)
    parts = [f"## {TITLE}", "", _md([_row(r) for r in records], HEAD), "",
             _md([_cpu_row(r) for r in records], CPU_HEAD), "",
             *[f"- {s}" for s in sentences(frame)], "", NOTE]
    if settings:
        parts += ["", "### Settings that differ between the engines", "",
                  _md(settings, settings_head)]
    return "\n".join(parts) + "\n"


def write_markdown(run: RunData, folder: Path) -> None:
    """peers.md in folder, where the run has peers.csv."""
    text = peers_markdown(run)
    if text:
        (folder / "peers.md").write_text(text)


def notes(run: RunData) -> list[str]:
    """The verdict's sentences: where each peer cell's difference to rlbench's sync comes from."""
    frame = read(run)
    return [] if frame is None else sentences(frame)


def html_section(run: RunData, sp=None) -> tuple[str, str] | None:
    return peers_section(run)


def wide_lines(run: RunData, sp=None) -> list[str]:
    return peers_lines(run)


REPORT = Report(html=html_section, files=write_markdown, brief=peers_lines, wide=wide_lines,
                notes=notes)
