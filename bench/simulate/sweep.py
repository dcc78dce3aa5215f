"""`rlbench simulate`: sweep device counts and rollout/train splits, validate, write simulate.json.

Device sweeps from a measured run scale the batch with the devices (weak scaling: prompts per
iteration = measured prompts * devices / measured devices, groups resampled from the measured
ones), so the per-device load stays the measured one; the paper preset keeps its 512 prompts
(strong scaling, the paper's setting).
"""
from __future__ import annotations

from pathlib import Path

from rlbench.errors import UserError
from rlbench.simulate import paper
from rlbench.simulate.calibrate import calibrate, validate
from rlbench.simulate.events import simulate
from rlbench.simulate.model import Calibration, Workload, save_calibration

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
            "train_devices": res.train_devices, "schedule": res.schedule, "staleness": res.staleness,
            "tpspd": res.tpspd, "speedup": res.tpspd / sync.tpspd, "iter_s": res.iter_s,
            "idle": res.idle, "rollout_occupancy": res.rollout_occupancy}


def sweep(cal: Calibration, workload_for, devices, shares, staleness: int = 1) -> tuple[list, list]:
    """-> (rows: sync + periodic/bounded async per split, best: best periodic-async split per count).

    workload_for(d) gives the workload simulated on d devices."""
    rows, best = [], []
    for d in devices:
        wl = workload_for(d)
        sync = simulate(cal, wl, "sync", d // 2, d - d // 2)
        rows.append(_row(d, None, sync, sync))
        for s in shares:
            n, m = split(d, s)
            for sched in ("periodic_async", "bounded_async"):
                rows.append(_row(d, s, simulate(cal, wl, sched, n, m, staleness=staleness), sync))
        b = paper.best_split(cal, wl, d, steps=min(16, d))
        best.append({"devices": d, "rollout_devices": b["rollout_devices"],
                     "train_devices": b["train_devices"], "tpspd": b["tpspd"],
                     "speedup": b["tpspd"] / sync.tpspd, "curve": b["curve"]})
    return rows, best


def _source(run_dir, preset, exponent: float | None) -> tuple[Calibration, Workload, object, str]:
    if preset is not None and preset not in PRESETS:
        raise UserError(f"--preset {preset!r}: allowed {', '.join(PRESETS)}")
    if preset == "paper-7b":
        cal, wl = paper.paper_preset()
        return cal, wl, lambda d: wl, "strong scaling: 512 prompts x 8 at every device count"
    if run_dir is None:
        raise UserError("give a RUN_DIR to calibrate from, or --preset paper-7b")
    cal, wl = calibrate(run_dir, exponent, exponent)
    ref = cal.train_ref_devices

    def workload_for(d: int) -> Workload:
        return wl.resample(max(1, round(wl.prompts * d / ref)), batches=3, seed=d)
    return cal, wl, workload_for, f"weak scaling: {wl.prompts} prompts per {ref} devices"


def run_simulation(run_dir: Path | None = None, preset: str | None = None, devices=None, shares=None,
                   out: Path | None = None, staleness: int = 1, plots: bool = True,
                   exponent: float | None = None) -> dict:
    """Everything `rlbench simulate` does; returns the simulate.json content (+ 'files').

    exponent: the device-scaling exponent of one process (calibrate's default when None)."""
    from rlbench.schema import atomic_write_json

    if run_dir is not None and not Path(run_dir).exists():
        raise UserError(f"{run_dir}: run folder not found")
    if exponent is not None and preset is not None:
        raise UserError("--exponent applies to a calibration from RUN_DIR, not to --preset")
    cal, wl, workload_for, scaling = _source(run_dir, preset, exponent)
    devices = list(devices or DEFAULT_DEVICES)
    shares = list(shares or DEFAULT_SHARES)
    rows, best = sweep(cal, workload_for, devices, shares, staleness)
    result = {"kind": "simulate", "source": preset or str(run_dir), "calibration": cal.to_dict(),
              "workload": wl.summary(), "scaling": scaling, "staleness": staleness,
              "devices": devices, "rollout_shares": shares, "rows": rows, "best_split": best}
    if run_dir is not None:
        result["validation"] = validate(run_dir, exponent, exponent)
    if preset == "paper-7b":
        result["paper"] = paper.paper_setting(cal, wl)
    out = Path(out) if out else (Path(run_dir) / "simulate" if run_dir else Path("runs") / f"simulate-{preset}")
    files = [save_calibration(out / "calibration.json", cal, wl)]
    if plots:
        from rlbench.simulate.plots import plot_all
        files += plot_all(result, out)
    atomic_write_json(out / "simulate.json", result)
    result["files"] = [str(f) for f in files + [out / "simulate.json"]]
    return result


def _table(head: list[str], body: list[list[str]]) -> str:
    w = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    lines = ["  ".join(v.rjust(x) if j else v.ljust(x) for j, (v, x) in enumerate(zip(r, w))).rstrip()
             for r in [head] + body]
    lines.insert(1, "  ".join("-" * x for x in w))
    return "\n".join(lines)


def _idle(idle: dict) -> str:
    return ", ".join(f"{k} {100 * v:.0f}" for k, v in idle.items())


def format_text(result: dict) -> str:
    """The terminal tables: sweep, best split, validation (with a run), paper setting (with the preset)."""
    cal = result["calibration"]
    parts = [f"simulate: {result['source']} ({cal['device']}; {result['scaling']})"]
    body = []
    for r in result["rows"]:
        sp = "colocated" if r["schedule"] == "sync" else f"{r['rollout_devices']}+{r['train_devices']}"
        name = r["schedule"] + (f" k={r['staleness']}" if r["schedule"] == "bounded_async" else "")
        body.append([str(r["devices"]), sp, name, f"{r['tpspd']:.1f}", f"{r['speedup']:.2f}x",
                     f"{r['iter_s']:.3g}", _idle(r["idle"])])
    parts.append(_table(["devices", "split", "schedule", "pred. TPSPD", "vs sync", "iter s", "idle % per pool"],
                        body))
    parts.append("best periodic-async split: " + "; ".join(
        f"{b['devices']} dev -> {b['rollout_devices']}+{b['train_devices']} ({b['speedup']:.2f}x)"
        for b in result["best_split"]))
    if "validation" in result:
        body = [[v["cell"], v["schedule"], f"{v['rollout_devices']}+{v['train_devices']}",
                 f"{v['measured_tpspd']:.1f}", f"{v['predicted_tpspd']:.1f}", f"{100 * v['error']:+.1f}%",
                 f"{v['measured_speedup']:.2f}x", f"{v['predicted_speedup']:.2f}x",
                 ", ".join(f"{k} {100 * p:.0f}/{100 * v['measured_idle'][k]:.0f}"
                           for k, p in v["predicted_idle"].items() if k in v["measured_idle"])]
                for v in result["validation"]]
        parts.append("validation (calibrated on the sync cell, so its row is in-sample):\n" + _table(
            ["cell", "schedule", "split", "measured TPSPD", "predicted", "error", "meas. speedup",
             "pred. speedup", "idle % pred/meas"], body))
    if "paper" in result:
        p = result["paper"]
        body = [[r["variant"], r["split"], f"{r['tpspd']:.1f}", f"{r['speedup']:.2f}x", _idle(r["idle"]),
                 r["paper"]] for r in p["rows"]]
        parts.append(f"paper setting ({p['devices']} devices, 7B, GSM8K-like lengths):\n" + _table(
            ["variant", "split", "pred. TPSPD", "vs sync", "idle % per pool", "paper reports"], body))
        parts.append("async speedup vs training throughput (tokens/s/device): " + ", ".join(
            f"{s['train_tokens_per_s_per_device']}: {s['async_speedup']:.2f}x"
            for s in p["sensitivity_train_throughput"]))
    parts.append("wrote: " + ", ".join(result.get("files", [])))
    return "\n\n".join(parts)
