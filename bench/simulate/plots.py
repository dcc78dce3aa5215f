"""PNG plots of a simulation: predicted TPSPD against device count, and against the rollout
share."""
from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from rlbench.reports.plots import save
from rlbench.core.costmodel.simulate import ASYNC, BOUNDED_K, REF

PLOT_FILES = ("tpspd_vs_devices.png", "tpspd_vs_share.png")
STYLES = [":", "-.", (0, (5, 4)), (0, (1, 4)), (0, (3, 2, 1, 2))]


def plot_devices(result: dict, path: Path) -> Path:
    """TPSPD (tokens/s/device) vs devices: sync, periodic-async at its best split and at each swept
    share, bounded-async at its best swept share."""
    rows, best = result["rows"], result["best_split"]
    devices = result["devices"]
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    sync = [next(r["tpspd"] for r in rows if r["devices"] == d and r["schedule"] == REF) for d
            in devices]
    ax.plot(devices, sync, "o-", color="#555555", label="sync (colocated)")
    ax.plot(devices, [b["tpspd"] for b in best], "s-", color="#1f77b4", lw=2,
            label="periodic_async (best split)")
    for i, share in enumerate(result["rollout_shares"]):
        ys = [next(r["tpspd"] for r in rows if r["devices"] == d and r["schedule"] == ASYNC
                   and r["overlap"] and r["rollout_share"] == share) for d in devices]
        ax.plot(devices, ys, ls=STYLES[i % len(STYLES)], color="#1f77b4", alpha=0.55, lw=1,
                label=f"periodic_async, rollout share {share:g}")
    for partial, marker, label in ((False, "^--", ""), (True, "v:", " + partial rollout")):
        rows_k = [[r["tpspd"] for r in rows if r["devices"] == d and r["schedule"] == BOUNDED_K
                   and bool(r.get("partial_rollout")) == partial] for d in devices]
        if all(rows_k):  # a simulate.json from before the partial rows has none
            ax.plot(devices, [max(v) for v in rows_k], marker, color="#d62728",
                    label=f"bounded_async k={result['staleness']}{label} (best share)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(devices, [str(d) for d in devices])
    ax.set_xlabel("devices (rollout + training)")
    ax.set_ylabel("predicted TPSPD (tokens/s/device)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"predicted TPSPD vs devices ({result['source']})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return save(fig, path)


def plot_share(result: dict, path: Path) -> Path:
    """Periodic-async TPSPD vs the rollout pool's share of the devices, one line per device count;
    the sync TPSPD of the same count as a dashed line."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    for i, b in enumerate(result["best_split"]):
        d, c = b["devices"], colors[i % len(colors)]
        xs = [p["rollout_devices"] / d for p in b["curve"]]
        ax.plot(xs, [p["tpspd"] for p in b["curve"]], "o-", ms=3, color=c, label=f"{d} devices")
        sync = next(r["tpspd"] for r in result["rows"] if r["devices"] == d and r["schedule"]
                    == REF)
        ax.axhline(sync, color=c, ls="--", lw=0.8)
        ax.plot([b["rollout_devices"] / d], [b["tpspd"]], "*", ms=11, color=c)
    ax.set_xlabel("rollout share of the devices (periodic_async); dashed: sync")
    ax.set_ylabel("predicted TPSPD (tokens/s/device)")
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.set_title("predicted TPSPD vs inference/training split (star: best)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)


def plot_all(result: dict, out: Path) -> list[Path]:
    out = Path(out)
    return [plot_devices(result, out / PLOT_FILES[0]), plot_share(result, out / PLOT_FILES[1])]
