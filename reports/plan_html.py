"""`rlbench plan --html PAGE`: the plan as one self-contained page in the report's style
(reports/html.py's CSS and tables): the verdict, the schedules' table, the predicted TPSPD by split
plot, the assumptions with their sources and what was read. Renders run_plan's result
(bench/plan/command.py); computes nothing."""
from __future__ import annotations

import base64
import io
from pathlib import Path

from matplotlib.figure import Figure

from rlbench.reports import plan_text
from rlbench.reports.html import CSS, esc, table, write_page
from rlbench.reports.palette import CELL_COLORS


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None}, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def split_plot(result: dict) -> str:
    """Predicted TPSPD of each schedule against the rollout pool's size; the sync run's TPSPD as a
    line; the best split's interval as an error bar."""
    fig = Figure(figsize=(8, 3.8))
    ax = fig.add_subplot()
    ref = result["reference_tpspd"]
    for k, p in enumerate(result["rows"]):
        color = CELL_COLORS[k % len(CELL_COLORS)]
        xs = [c["rollout_devices"] for c in p["curve"]]
        ax.plot(xs, [c["tpspd"] for c in p["curve"]], marker="o", ms=4, color=color,
                label=p["label"])
        if p["low"] is not None:
            ax.errorbar([p["rollout_devices"]], [p["tpspd"]], yerr=[[p["tpspd"] - p["low"] * ref],
                        [p["high"] * ref - p["tpspd"]]], color=color, capsize=4, lw=1)
    ax.axhline(ref, color="#888", lw=1, ls="--", label="sync (the log)")
    ax.set_xlabel(f"rollout devices (of {result['devices']}; the rest train)")
    ax.set_ylabel("predicted TPSPD")
    ax.set_title("Predicted TPSPD by device split (bars: the best split's interval)", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return f'<figure><img alt="TPSPD by split" src="data:image/png;base64,{_png(fig)}"></figure>'


def _rows(result: dict) -> tuple[list[list], list[str]]:
    head = ["schedule", "best split", "pred. TPSPD", "vs sync", "interval low", "interval high",
            "verdict"]
    body = [[p["label"], f"{p['rollout_devices']}+{p['train_devices']}", round(p["tpspd"], 1),
             round(p["speedup"], 3), p["low"] and round(p["low"], 3),
             p["high"] and round(p["high"], 3),
             p["outcome"] or ""] for p in result["rows"]]
    return body, head


def _assumptions(result: dict) -> str:
    if not result["assumptions"]:
        return "<p>None: every cost is measured in the run.</p>"
    body = [[a["name"], a["value"], f"{a['low']:.3g}–{a['high']:.3g}", a["source"], a["why"]]
            for a in result["assumptions"]]
    widest = " ".join(plan_text.widest(result))
    return table(body, ["assumption", "value", "range", "source",
                        "why"]) + (f"<p>{esc(widest)}</p>" if widest else "")


def write_plan_html(result: dict, out: Path) -> Path:
    """Write the page to `out` atomically; -> its path."""
    body, head = _rows(result)
    prov = "".join(f"<p>{esc(line)}</p>" for line in plan_text.paragraphs(result))
    verdict = esc(plan_text.verdict(result).replace(chr(10), ' '))
    html = (f"<!doctype html><html><head><meta charset='utf-8'><title>rlbench plan</title>"
            f"<style>{CSS}</style></head><body><h1>rlbench plan</h1>"
            f"<p class='meta'>{esc(result['log'])} ({esc(result['format'])})</p>"
            f"<p class='verdict'>{verdict}</p><h2>Schedules</h2>{table(body, head)}"
            f"<h2>Predicted TPSPD by split</h2>{split_plot(result)}"
            f"<h2>Assumptions</h2>{_assumptions(result)}"
            f"<h2>What was read</h2>{prov}</body></html>")
    return write_page(html, out)
