""""Against a real framework": peers.csv (computed by bench/run/peers.py) as the terminal's lines and the
report's section: the cells side by side (TPSPD, the ratio to rlbench's sync, device-seconds per 1,000
trained tokens by stage, accuracy), one sentence per peer cell saying where its difference to rlbench's
sync comes from, and the settings that differ between the engines (each TRL cell's results.json)."""
from __future__ import annotations

import pandas as pd

from rlbench.reports.data import RunData
from rlbench.reports.html import esc, table
from rlbench.reports.tables import fmt

TITLE = "Against a real framework"
CSV = "peers.csv"
SHOWN_STAGES = ("rollout", "old_logprob", "ref_logprob", "update", "optimizer_step", "weight_sync", "other")
HEAD = ["cell", "engine", "TPSPD median (min–max)", "vs sync (per iteration)",
        *[f"{s} s/ktok" for s in SHOWN_STAGES], "total s/ktok", "tokens/iter", "max stale", "acc first→final",
        "status"]
NOTE = ("Same devices, model, data, prompts per iteration, G, response cap, sampling, optimizer and loss "
        "(tests/test_trl_loss.py); each engine generates its own samples. s/ktok: device-seconds per 1,000 "
        "trained tokens over the measured iterations, by stage (summed over workers); `other`: device time "
        "in no stage (idle, and a peer's work outside rlbench's stage names); total = 1000 / TPSPD pooled. "
        "vs sync: TPSPD median over rlbench's sync; in brackets the range of per-iteration ratios (iteration "
        "k of each cell ran back to back when the cells took turns).")


def read(run: RunData) -> pd.DataFrame | None:
    path = run.path / CSV
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    return frame.astype(object).where(frame.notna(), None)


def x(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _row(r: dict) -> list[str]:
    tp = "–" if r["tpspd_median"] is None else \
        f"{fmt(r['tpspd_median'])} ({fmt(r['tpspd_min'])}–{fmt(r['tpspd_max'])})"
    paired = "" if r["vs_sync_paired_min"] is None else \
        f" ({r['vs_sync_paired_min']:.2f}–{r['vs_sync_paired_max']:.2f})"
    stages = [fmt(r[f"{s}_s_per_ktok"]) if r[f"{s}_s_per_ktok"] else "–" for s in SHOWN_STAGES]
    engine = r["engine"] if r["steps_per_generation"] in (None, 1) else \
        f"{r['engine']} ({r['steps_per_generation']} steps/generation)"
    return [r["cell"], engine, tp, x(r["vs_sync"]) + paired, *stages, fmt(r["total_s_per_ktok"]),
            fmt(r["tokens_per_iteration"]), fmt(r["staleness_max"]),
            f"{fmt(r['accuracy_first'])}→{fmt(r['accuracy_final'])}", str(r["status"])]


def sentences(frame: pd.DataFrame) -> list[str]:
    """Per peer cell: its TPSPD against rlbench's sync and the stages that make the difference (the
    `<stage>_vs_sync` columns, largest first)."""
    sync = frame[frame["engine"] == "rlbench"].iloc[0]
    keys = [c[:-len("_vs_sync")] for c in frame.columns if c.endswith("_vs_sync") and c != "total_vs_sync"]
    out = []
    for r in frame[frame["engine"] != "rlbench"].to_dict("records"):
        diffs = sorted(((k, r[f"{k}_vs_sync"]) for k in keys if r[f"{k}_vs_sync"]), key=lambda d: -abs(d[1]))
        if not r["vs_sync"] or not diffs or r["total_vs_sync"] is None:
            continue
        than = "faster than" if r["vs_sync"] < 1 else "slower than"
        parts = ", ".join(f"{k} {d:+.3f}" for k, d in diffs[:4])
        out.append(f"rlbench's {sync['cell']} reaches {1 / r['vs_sync']:.2f}× the TPSPD of {r['cell']} ({than} "
                   f"it). Per 1,000 tokens {r['cell']} spends {r['total_s_per_ktok']:.3f} device-s, "
                   f"{sync['cell']} {sync['total_s_per_ktok']:.3f} ({r['total_vs_sync']:+.3f}: {parts}).")
    return out


def differing_settings(run: RunData) -> list[list[str]]:
    """The settings the engines cannot share, from the first peer cell's results.json."""
    peer = next((c for c in run.cells if (c.result.get("external") or {}).get("differences")), None)
    return [[d["setting"], d["rlbench"], d["trl"], d["why"]] for d in peer.result["external"]["differences"]] \
        if peer else []


def peers_lines(run: RunData) -> list[str]:
    frame = read(run)
    if frame is None:
        return []
    rows = [HEAD] + [_row(r) for r in frame.to_dict("records")]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return ["", f"{TITLE} ({CSV}):", *lines, *sentences(frame)]


def peers_section(run: RunData) -> tuple[str, str] | None:
    frame = read(run)
    if frame is None:
        return None
    settings = differing_settings(run)
    return TITLE, ("".join(f"<p><b>{esc(s)}</b></p>" for s in sentences(frame))
                   + table([_row(r) for r in frame.to_dict("records")], HEAD) + f"<p>{esc(NOTE)}</p>"
                   + ("<h3>Settings that differ between the engines</h3>"
                      + table(settings, ["setting", "rlbench", "TRL", "why"]) if settings else "")
                   + "<details><summary>Every column (peers.csv)</summary>"
                   + table([list(r) for r in frame.itertuples(index=False)], list(frame.columns)) + "</details>")


def peers_markdown(run: RunData) -> str | None:
    """peers.md: the section as Markdown (docs/results/peers.md quotes it); None without peers.csv."""
    frame = read(run)
    if frame is None:
        return None
    def md(rows, head):
        return "\n".join("| " + " | ".join(str(v).replace("|", "/") for v in r) + " |"
                         for r in [head, ["---"] * len(head), *rows])
    settings = differing_settings(run)
    parts = [f"## {TITLE}", "", md([_row(r) for r in frame.to_dict("records")], HEAD), "",
             *[f"- {s}" for s in sentences(frame)], "", NOTE]
    if settings:
        parts += ["", "### Settings that differ between the engines", "", md(settings, ["setting", "rlbench", "TRL", "why"])]
    return "\n".join(parts) + "\n"
