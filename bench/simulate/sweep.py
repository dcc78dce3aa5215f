"""`rlbench simulate`: sweep device counts and rollout/train splits, validate, write simulate.json.

From a run: the sync cell's per-device costs (calibrate.py) on N rollout workers + M trainer ranks,
every device at the measured cost; the batch grows with the devices (weak scaling: prompts per
iteration = measured prompts x devices / measured devices, the measured groups repeated), so each
device keeps the measured load. The paper preset keeps its 512 prompts (strong scaling, the paper's
setting) at stated costs (paper.py).
"""
from __future__ import annotations

from pathlib import Path

from rlbench.core import schedules
from rlbench.core.errors import UserError
from rlbench.core.results.schema import atomic_write_json
from rlbench.simulate import link, paper
from rlbench.simulate.calibrate import calibrate, validate
from rlbench.core.costmodel.simulate import ASYNC, BOUNDED_K, REF, simulate
from rlbench.simulate.model import costs_of, prompts_of, rescale, summary

PRESETS = ("paper-7b",)
DEFAULT_DEVICES = (8, 16, 32, 64)
DEFAULT_SHARES = (0.25, 0.5, 0.75)


def parse_list(text: str | None, kind: type, option: str) -> list | None:
    """'8,16,32' -> [8, 16, 32] (None stays None); bad syntax or range -> UserError."""
    if text is None:
        return None
    items = [x.strip() for x in str(text).split(",")]
    try:
        values = [kind(x) for x in items]
    except ValueError:
        raise UserError(f"{option} {text!r}: expected comma-separated {kind.__name__}s, e.g. "
                        f"{'8,16,32,64' if kind is int else '0.25,0.5,0.75'}") from None
    if kind is int and any(v < 2 for v in values):
        raise UserError(f"{option} {text!r}: every device count must be >= 2 (one per pool)")
    if kind is float and any(not 0 < v < 1 for v in values):
        raise UserError(f"{option} {text!r}: every rollout share must be strictly between 0 and 1")
    return values


def split(devices: int, share: float) -> tuple[int, int]:
    n = min(devices - 1, max(1, round(devices * share)))
    return n, devices - n


def _row(d: int, share, res, sync) -> dict:
    return {"devices": d, "rollout_share": share, "rollout_devices": res.rollout_devices,
            "train_devices": res.train_devices, "schedule": res.schedule, "overlap": res.overlap,
            "staleness": res.staleness, "partial_rollout": res.partial_rollout, "tpspd": res.tpspd,
            "speedup": res.tpspd / sync.tpspd, "iter_s": res.iter_s, "link_s": res.link_s,
            "link_share": res.link_share}


def sweep(batches_for, devices, shares, staleness: int = 1, layout=None) -> tuple[list, list]:
    """-> (rows: sync + periodic-async, its barrier variant, bounded-async and bounded-async with
    partial rollout (recompute: its upper bound) per split, best: the best periodic-async split per
    count). batches_for(d) gives the batches simulated on d devices; layout: the devices on nodes
    and the link between them (core/costmodel/link.py), None: one node."""
    rows, best = [], []
    for d in devices:
        bs = batches_for(d)
        sync = simulate(bs, REF, d // 2, d - d // 2, layout=layout)
        rows.append(_row(d, None, sync, sync))
        for s in shares:
            n, m = split(d, s)
            for res in (simulate(bs, ASYNC, n, m, layout=layout),
                        simulate(bs, ASYNC, n, m, overlap=False, layout=layout),
                        simulate(bs, BOUNDED_K, n, m, staleness=staleness, layout=layout),
                        simulate(bs, BOUNDED_K, n, m, staleness=staleness, partial_rollout=True,
                                 layout=layout)):
                rows.append(_row(d, s, res, sync))
        b = paper.best_split(bs, d, steps=min(16, d), layout=layout)
        best.append({"devices": d, "rollout_devices": b["rollout_devices"],
                     "train_devices": b["train_devices"], "tpspd": b["tpspd"],
                     "speedup": b["tpspd"] / sync.tpspd, "curve": b["curve"]})
    return rows, best


def _source(run_dir, preset) -> tuple[list, object, dict]:
    """-> (the batches as calibrated or stated, batches_for(d), description with the weights'
    bytes)."""
    if preset is not None and preset not in PRESETS:
        raise UserError(f"--preset {preset!r}: allowed {', '.join(PRESETS)}")
    if preset == "paper-7b":
        batches = paper.paper_batches()
        return batches, lambda d: batches, {
            "source": "preset paper-7b", "device": "A100/910B-class accelerator (stated costs)",
            "scaling": "strong scaling: 512 prompts x 8 at every device count",
            "weight_bytes": paper.WEIGHT_BYTES}
    if run_dir is None:
        raise UserError("give a RUN_DIR to calibrate from, or --preset paper-7b")
    batches, cell = calibrate(run_dir)
    ranks, prompts = batches[0].n, prompts_of(batches[0])

    def batches_for(d: int) -> list:
        return [rescale(b, d) for b in batches]
    dev = ((cell.get("provenance") or {}).get("device") or {}).get("type", "?")
    return batches, batches_for, {
        "source": str(run_dir),
        "device": f"{dev}, per device as measured in sync cell {cell.get('cell')!r} "
        f"({ranks} data-parallel ranks, iterations {[it for it in _measured_its(cell)]})",
        "scaling": f"weak scaling: {prompts} prompts per {ranks} devices",
        "weight_bytes": link.weight_bytes(cell)}


def _measured_its(cell: dict) -> list[int]:
    its = cell.get("iterations") or []
    return [it["iteration"] for it in its if not it.get("warmup")] or [it["iteration"] for it
                                                                       in its]


def run_simulation(run_dir: Path | None = None, preset: str | None = None, devices=None,
                   shares=None,
                   out: Path | None = None, staleness: int = 1, plots: bool = True,
                   stated_link=None,
                   devices_per_node: int | None = None) -> dict:
    """Everything `rlbench simulate` does; returns the simulate.json content (+ 'files').
    stated_link: the user's link (costmodel/link.py Link), else the one a run on several nodes
    measured, else none (one node); devices_per_node: how the devices sit on nodes (default 1)."""
    if run_dir is not None and not Path(run_dir).exists():
        raise UserError(f"{run_dir}: run folder not found")
    batches, batches_for, about = _source(run_dir, preset)
    devices = list(devices or DEFAULT_DEVICES)
    shares = list(shares or DEFAULT_SHARES)
    found = stated_link or (link.link_from_run(run_dir) if run_dir is not None else None)
    nodes = link.layout(found, devices_per_node, about.get("weight_bytes"), batches)
    rows, best = sweep(batches_for, devices, shares, staleness, nodes)
    calibration = {**about, "per_batch": [costs_of(b) for b in batches]}
    result = {"kind": "simulate", "source": preset or str(run_dir), "calibration": calibration,
              "workload": summary(batches), "scaling": about["scaling"], "staleness": staleness,
              "devices": devices, "rollout_shares": shares, "rows": rows, "best_split": best}
    if nodes is not None:
        result["link"] = {**nodes.link.to_dict(), "devices_per_node": nodes.devices_per_node,
                          "weight_bytes": nodes.weight_bytes, "group_bytes": nodes.group_bytes}
        if stated_link is not None and run_dir is not None:
            check = link.weight_sync_check(run_dir, stated_link, nodes.weight_bytes)
            if check is not None:
                result["weight_sync_check"] = check
    if run_dir is not None:
        result["validation"] = validate(run_dir)
    if preset == "paper-7b":
        result["paper"] = paper.paper_setting()
    out = Path(out) if out else (Path(run_dir) / "simulate" if run_dir else Path("runs")
                                 / f"simulate-{preset}")
    atomic_write_json(out / "calibration.json", calibration)
    files = [out / "calibration.json"]
    if plots:
        # inside: matplotlib; `rlbench --help` imports this package
        from rlbench.simulate.plots import plot_all
        files += plot_all(result, out)
    atomic_write_json(out / "simulate.json", result)
    result["files"] = [str(f) for f in files + [out / "simulate.json"]]
    return result


def _table(head: list[str], body: list[list[str]]) -> str:
    w = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    lines = ["  ".join(v.rjust(x) if j else v.ljust(x)
                       for j, (v, x) in enumerate(zip(r, w))).rstrip()
             for r in [head] + body]
    lines.insert(1, "  ".join("-" * x for x in w))
    return "\n".join(lines)


def _name(r: dict) -> str:
    partial = " + partial rollout" if r.get("partial_rollout") else ""
    if r.get("staleness") is not None:  # a bounded-staleness model's row
        return f"{r['schedule']} k={r['staleness']}{partial}"
    return r["schedule"] + ("" if r.get("overlap", True) else " (barrier)") + partial


def _colocated(r: dict) -> bool:
    spec = schedules.get(r["schedule"])
    return spec is not None and spec.colocated


def format_text(result: dict) -> str:
    """The terminal tables: sweep, best split, validation (with a run), paper setting (with the
    preset)."""
    cal = result["calibration"]
    parts = [f"simulate: {result['source']} ({cal['device']}; {result['scaling']}; per-device "
             "costs, no scaling exponent)"]
    linked = "link" in result
    body = [[str(r["devices"]),
             "colocated" if _colocated(r) else f"{r['rollout_devices']}+{r['train_devices']}",
             _name(r), f"{r['tpspd']:.1f}", f"{r['speedup']:.2f}x", f"{r['iter_s']:.3g}"]
            + ([f"{100 * r['link_share']:.1f}%"] if linked else []) for r in result["rows"]]
    if linked:
        ln = result["link"]
        parts.append(f"link between nodes: {ln['gbps']:.3g} Gbit/s, {1e3 * ln['latency_s']:.3g} ms "
                     f"one way, {1e3 * ln['overhead_s']:.3g} ms per transfer ({ln['source']}); "
                     f"{ln['devices_per_node']} device(s) per node; weights "
                     f"{ln['weight_bytes'] / 1e6:.1f} MB, a group {ln['group_bytes'] / 1e3:.1f} kB")
    parts.append(_table(["devices", "split", "schedule", "pred. TPSPD", "vs sync", "iter s"]
                        + (["link %"] if linked else []), body))
    if "weight_sync_check" in result:
        w = result["weight_sync_check"]
        parts.append(f"weight sync across nodes ({w['weight_bytes'] / 1e6:.3g} MB): predicted "
                     f"{w['predicted_s']:.3g} s from the stated link, measured "
                     f"{w['measured_median_s']:.3g} s (median of {w['transfers']}, shortest "
                     f"{w['measured_min_s']:.3g} s): {100 * w['error']:+.0f}%")
    parts.append("best periodic-async split: " + "; ".join(
        f"{b['devices']} dev -> {b['rollout_devices']}+{b['train_devices']} ({b['speedup']:.2f}x)"
        for b in result["best_split"]))
    if "validation" in result:
        body = [[v["cell"], _name(v), "colocated" if _colocated(v) else
                 f"{v['rollout_devices']}+{v['train_devices']}", f"{v['measured_tpspd']:.1f}",
                 f"{v['predicted_tpspd']:.1f}", f"{100 * v['error']:+.1f}%",
                 f"{v['measured_speedup']:.2f}x",
                 f"{v['predicted_speedup']:.2f}x",
                 v["predicted_from"]] for v in result["validation"]]
        parts.append("the run's own cells (the report's model and numbers; sync is in-sample):\n"
                     + _table(
            ["cell", "schedule", "split", "measured TPSPD", "predicted", "error", "meas. speedup",
             "pred. speedup", "from"], body))
    if "paper" in result:
        p = result["paper"]
        body = [[r["variant"], r["split"], f"{r['tpspd']:.1f}", f"{r['speedup']:.2f}x", r["paper"]]
                for r in p["rows"]]
        parts.append(f"paper setting ({p['devices']} devices, 7B, GSM8K-like lengths, stated "
                     f"costs):\n" + _table(
            ["variant", "split", "pred. TPSPD", "vs sync", "paper reports"], body))
        parts.append("async speedup vs training throughput (tokens/s/device): " + ", ".join(
            f"{s['train_tokens_per_s_per_device']}: {s['async_speedup']:.2f}x"
            for s in p["sensitivity_train_throughput"]))
    parts.append("wrote: " + ", ".join(result.get("files", [])))
    return "\n\n".join(parts)
