"""Validation of `rlbench plan` (docs/results/plan.md): its predictions against measured asynchronous runs.

    .venv/bin/python scripts/plan_validation.py --runs RUN_DIR [RUN_DIR ...]   # (a) rlbench's own runs
    .venv/bin/python scripts/plan_validation.py --published                    # (b) published sync/async pairs
    .venv/bin/python scripts/plan_validation.py --train-speed 1.0 1.5 1.7      # (b) with one stated speed
    .venv/bin/python scripts/plan_validation.py --verl RUN_DIR                 # (c) VERL's own pair, same cores

(a) For every asynchronous cell of a run: the plan from the sync cell alone at that cell's split, twice: from
the sync cell's results.json with its samples and events (the in-run model's measurements), and from the
results.json alone (its iterations' stage seconds read as a framework's log, with the stated assumptions);
beside the measured TPSPD and the report's in-run prediction.
(b) For each published pair whose source gives the synchronous run's stage seconds: a VERL log is written from
those numbers (every step the same: the sources give means), planned at the published split with the schedule
closest to the published one, at three response-length means (the sources give only the cap), and the
predicted speedup set beside the published per-step ratio and total-time ratio.
(c) For a `--ablation verl` run: the plan from VERL's sync cell's log (its file logger's JSONL) and from rlbench's
sync run beside it, at the recipes' split, against each VERL recipe's measured TPSPD over VERL's sync (each cell
over the sync run it took turns with, so the machine's drift cancels).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from rlbench.analysis.intervals import outcome
from rlbench.analysis.plan import PlanInput, Row, predict_row, widened, rows
from rlbench.core.config_files import recorded_config
from rlbench.core.costmodel.predict import predict_async
from rlbench.core.results import schema
from rlbench.plan.command import plan_input
from rlbench.plan.detect import read_log
from rlbench.plan.rlbench_results import sync_cell

SOURCES = {
    "osp": "verl recipe/one_step_off_policy/README.md, 'Experimental Results' (16 H20, Qwen2.5-Math-7B, DAPO)",
    "fa": "verl recipe/fully_async_policy/README.md, 'Asynchronous Training on 7B Model' (H20, "
          "Qwen2.5-Math-7B, DAPO, rollout.n 16, 512 prompts per step)",
    "fa128": "verl recipe/fully_async_policy/README.md, '128-card 7B Asynchronous Mode Experiment'",
    "fa30": "verl recipe/fully_async_policy/README.md, '30B Model Mode Experiment' (H20, Qwen3-30B-A3B-Base, "
            "GRPO, 8K responses)",
}
# Hugging Face config.json values of the published runs' models (their model cards' config files)
QWEN25_MATH_7B = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                  "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False}
QWEN3_30B_A3B = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
                 "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                 "vocab_size": 151936, "tie_word_embeddings": False}
# (name, source, GPUs, rollout GPUs, plan row, sync stage seconds, model, response cap, async step s,
#  published total-time ratio)
PAIRS = [
    ("one-step-off, FSDP2", "osp", 16, 4, "one_step_off",
     {"step": 749, "gen": 321, "old_log_prob": 88, "update_actor": 286}, QWEN25_MATH_7B, 20480, 520, 1.24),
    ("one-step-off, Megatron", "osp", 16, 4, "one_step_off",
     {"step": 699, "gen": 207, "old_log_prob": 119, "update_actor": 344}, QWEN25_MATH_7B, 8192, 566, 1.40),
    ("fully async 16:16 (staleness 0.5, partial)", "fa", 32, 16, "k=1",
     {"step": 790.10, "gen": 357.41, "old_log_prob": 107.71, "update_actor": 269.80}, QWEN25_MATH_7B, 28672,
     294.77, 2.66),
    ("fully async 32:32 (staleness 0.5, partial)", "fa", 64, 32, "k=1",
     {"step": 365.28, "gen": 150.72, "old_log_prob": 70.26, "update_actor": 133.41}, QWEN25_MATH_7B, 28672,
     189.26, 1.92),
    ("fully async 64:64 (staleness 0.5, partial)", "fa", 128, 64, "k=1",
     {"step": 356.30, "gen": 177.85, "old_log_prob": 53.92, "update_actor": 113.81}, QWEN25_MATH_7B, 28672,
     150.63, 2.35),
    ("stream, staleness 0, 64:64", "fa128", 128, 64, "periodic_async",
     {"step": 356.30, "gen": 177.85, "old_log_prob": 53.92, "update_actor": 113.81}, QWEN25_MATH_7B, 28672,
     231.34, 1.58),
    ("30B fully async 96:32 (staleness 0.5, partial)", "fa30", 128, 96, "k=1",
     {"step": 497.89, "gen": 348.05, "old_log_prob": 28.73, "ref": 20.86, "update_actor": 86.27}, QWEN3_30B_A3B,
     8192, 282.75, 1.72),
]
# What each source's asynchronous run shows of its training pool (not a sync log's to know): (the sync run's
# training GPU-seconds a step, the async run's), each the stages' seconds x their GPUs. one-step-off: old log-probs
# + update (the async table's, 16 GPUs against 12); fully async: update (+ ref for the 30B), which those runs
# train with (no old-log-prob pass). Their ratio: the split pool's training speed per GPU, for --source-speed.
TRAINING_GPU_S = {
    "one-step-off, FSDP2": (374 * 16, 445 * 12),
    "one-step-off, Megatron": (463 * 16, 467 * 12),
    "fully async 16:16 (staleness 0.5, partial)": (269.80 * 32, 313.81 * 16),
    "fully async 32:32 (staleness 0.5, partial)": (133.41 * 64, 156.98 * 32),
    "fully async 64:64 (staleness 0.5, partial)": (113.81 * 128, 113.16 * 64),
    "stream, staleness 0, 64:64": (113.81 * 128, 98.77 * 64),
    "30B fully async 96:32 (staleness 0.5, partial)": ((86.27 + 20.86) * 128, (206.63 + 50.05) * 32),
}
FAMILY = {"osp": "one-step-off", "fa": "fully async 7B", "fa128": "fully async 7B", "fa30": "fully async 30B"}
PROMPTS, G, PROMPT_LEN = 512, 16, 200  # DAPO's batch (the sources); prompt length: assumed
RESPONSE_MEANS = (0.1, 0.2, 0.35)  # response mean as a share of the cap: not in the sources, so a range


def _row(label_start: str) -> Row:
    return next(r for r in rows("keep") if r.label.split(" ")[0] == label_start)


def _cell_row(cell: dict) -> tuple[Row, int] | None:
    """The plan row of an asynchronous cell and its rollout-device count."""
    eng = recorded_config(cell).engine
    sched = (cell.get("switches") or {}).get("schedule") or eng.schedule
    label = {"periodic_async": "periodic_async" if eng.overlap else "barrier", "one_step_off": "one_step_off"}.get(
        sched, "k=1" if sched == "bounded_async" and getattr(eng, "partial_rollout", False) else None)
    if label is None:
        return None
    rollout = sum(1 for p in cell.get("placement") or [] if p.get("role") == "rollout") or 1
    return _row(label), rollout


def own_run(run_dir: Path) -> list[dict]:
    cells = schema.load_run(run_dir)
    sync = sync_cell(run_dir)
    full = read_log(Path(sync["_dir"]) / schema.RESULTS)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(Path(sync["_dir"]) / schema.RESULTS, Path(tmp) / schema.RESULTS)  # results.json alone
        alone = read_log(Path(tmp) / schema.RESULTS)
    n = full.devices
    inp_full, inp_alone = plan_input(full, n)[0], plan_input(alone, n)[0]
    samples, events = full.extra["samples"], full.extra["events"]
    out = []
    for cell in cells:
        got = _cell_row(cell) if cell is not sync else None
        its = [it["tpspd"] for it in cell.get("iterations") or [] if not it.get("warmup")]
        if got is None or not its:
            continue
        row, r = got
        measured = statistics.median(its)
        in_run = predict_async(sync, samples, events, r, max(1, n - r), overlap=row.label != "barrier (split alone)",
                               devices=n)["predicted_tpspd"] if row.schedule == "periodic_async" else None
        a, b = predict_row(inp_full, row, split=r), predict_row(inp_alone, row, split=r)
        out.append({"run": str(run_dir), "cell": cell["cell"], "split": f"{r}+{max(1, n - r)} on {n}",
                    "measured": measured, "in_run": in_run, "plan": a["tpspd"], "plan_alone": b["tpspd"],
                    "alone_low": b["low"] * statistics.median(inp_alone.reference) if b["low"] else None,
                    "alone_high": b["high"] * statistics.median(inp_alone.reference) if b["high"] else None})
    return out


# VERL's recipe cells (bench/experiments/peers/cells.py VERL_CELLS) -> the plan row closest to each: its
# recipes train on the rollout's log-probs (no old-log-prob pass: algorithm.rollout_correction.bypass_mode);
# fully async at staleness 0 streams on-policy batches (VERL's own name for it: stream), above it one batch may
# be stale, with partial rollout the stale batch's generations resume under new weights
VERL_ROWS = {"verl_one_step_off": "one_step_off", "verl_fully_async": "periodic_async",
             "verl_fully_async_stale": "one_step_off", "verl_fully_async_partial": "k=1"}


def _paired(cell: dict, ref: dict) -> float:
    """Median of the cell's per-iteration TPSPD over its pair's sync run's (measured iterations)."""
    ours = {it["iteration"]: it["tpspd"] for it in ref["iterations"] if not it.get("warmup")}
    return statistics.median(it["tpspd"] / ours[it["iteration"]] for it in cell["iterations"]
                             if not it.get("warmup") and it["iteration"] in ours)


def verl_pair(run_dir: Path, speed: float | None = None) -> list[dict]:
    """(c): each VERL recipe cell's measured speedup over VERL's sync against the plan's from VERL's sync log
    and from rlbench's sync run (sync@verl), at 1 rollout + 1 training device; speed: the split pool's training
    speed per device stated (--assume train-speed), else the plan's default."""
    cells = {c["cell"]: c for c in schema.load_run(run_dir)}
    verl, ref = cells["verl"], cells["sync@verl"]
    base = _paired(verl, ref)  # VERL's sync over rlbench's sync beside it
    n = verl["iterations"][0]["devices"]
    stated = {"train-speed": speed} if speed else None
    from_verl = plan_input(read_log(Path(verl["_dir"]) / "verl_metrics.jsonl"), n, stated=stated)[0]
    from_ours = plan_input(read_log(Path(ref["_dir"]) / schema.RESULTS), n)[0]  # measured: nothing assumed
    out = []
    for name, label in VERL_ROWS.items():
        if name not in cells:
            continue
        measured = _paired(cells[name], cells[f"sync@{name}"]) / base
        a, b = _predict(from_verl, _row(label), 1, lean=True), _predict(from_ours, _row(label), 1, lean=True)
        out.append({"cell": name, "row": a["label"], "measured": measured, "from_verl": a["speedup"],
                    "verl_low": a["low"], "verl_high": a["high"], "from_ours": b["speedup"],
                    "tpspd": statistics.median(it["tpspd"] for it in cells[name]["iterations"]
                                               if not it.get("warmup"))})
    return out


def _verl_log(path: Path, stages: dict, gpus: int, cap: int, mean: float, steps: int = 12) -> Path:
    tokens = PROMPTS * G * (PROMPT_LEN + mean)
    data = {f"timing_s/{k}": v for k, v in stages.items()}
    data.update({"perf/total_num_tokens": tokens, "perf/throughput": tokens / (stages["step"] * gpus),
                 "response_length/mean": mean, "response_length/max": cap, "prompt_length/mean": PROMPT_LEN})
    path.write_text("".join(json.dumps({"step": k, "data": data}) + "\n" for k in range(1, steps + 1)))
    return path


def _predict(inp: PlanInput, row: Row, r: int, lean: bool) -> dict:
    """row at split r; lean: trained without the old-log-prob pass (the published fully-async runs took the
    rollout's log-probs: their tables show no old_log_prob), widened as the row with that pass is."""
    base = predict_row(inp, row, split=r)
    if not lean or not inp.without_old_logprob:  # (a log whose old-log-prob pass is not timed apart: as it is)
        return base
    out = predict_row(PlanInput(inp.without_old_logprob, inp.reference, inp.devices, inp.partial), row, split=r)
    out["low"], out["high"] = widened(out["step_low"], out["step_high"], base["assumption_factor"])
    out["outcome"] = outcome(out["speedup"], out["low"], out["high"])
    out["label"] += " + no old-log-prob pass"
    return out


def train_speed(name: str, src: str, mode: str | float | None) -> float | None:
    """The split pool's training speed per GPU stated for a pair: `own`: its source's asynchronous run's
    (TRAINING_GPU_S); `others`: the median of the other experiment families' (leave one family out: the 7B
    fully-async and streaming pairs share their sync runs); a number: that one value for every pair; None:
    not stated (the default assumption)."""
    if isinstance(mode, float):
        return mode
    speeds = {n: a / b for n, (a, b) in TRAINING_GPU_S.items()}
    if mode == "own":
        return speeds[name]
    if mode == "others":
        family = {p[0]: FAMILY[p[1]] for p in PAIRS}
        return statistics.median(v for n, v in speeds.items() if family[n] != FAMILY[src])
    return None


def published(roofline: bool = True, source_speed: str | float | None = None) -> list[dict]:
    """roofline: plan with --model (the pair's config) and --device H20; else with the defaults. source_speed
    (train_speed's mode): with a split pool's training speed stated (--assume train-speed=...), from the
    pair's own asynchronous run (not a prediction from the sync log alone: how much of the error that one
    quantity accounts for) or from the other sources' runs."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, src, gpus, r, label, stages, model, cap, async_step, total_ratio in PAIRS:
            cfg = Path(tmp) / f"{src}-config.json"
            cfg.write_text(json.dumps(model))
            preds = []
            speed = train_speed(name, src, source_speed)
            stated = {"train-speed": speed} if speed else None
            for share in RESPONSE_MEANS:
                log = read_log(_verl_log(Path(tmp) / f"{src}-{share}.jsonl", stages, gpus, cap, share * cap))
                inp = plan_input(log, gpus, cfg, "H20", stated)[0] if roofline else \
                    plan_input(log, gpus, stated=stated)[0]
                preds.append(_predict(inp, _row(label), r, lean=src != "osp"))
            mid = preds[1]
            out.append({"pair": name, "source": SOURCES[src], "gpus": gpus, "split": f"{r}+{gpus - r}",
                        "row": mid["label"], "published_step": stages["step"] / async_step,
                        "published_total": total_ratio, "predicted": mid["speedup"],
                        # a mean whose steps all give one ratio has no interval of its own: its value stands
                        "low": min(p["speedup"] if p["low"] is None else p["low"] for p in preds),
                        "high": max(p["speedup"] if p["high"] is None else p["high"] for p in preds),
                        "by_mean": [p["speedup"] for p in preds], "train_speed": speed})
    return out


def _md(head: list[str], body: list[list]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] +
                     ["| " + " | ".join(str(v) for v in r) + " |" for r in body])


def _pct(a, b) -> str:
    return "–" if a is None or b is None else f"{100 * (a / b - 1):+.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", type=Path, default=[])
    ap.add_argument("--published", action="store_true")
    ap.add_argument("--verl", type=Path, help="(c) a `--ablation verl` run folder (with --train-speed X: that "
                    "training speed stated)")
    ap.add_argument("--no-roofline", action="store_true", help="(b) with the defaults, without --model/--device")
    ap.add_argument("--source-speed", choices=["own", "others"], help="(b) with a split pool's training speed "
                    "stated (--assume train-speed): each pair's own source's (the error that quantity accounts "
                    "for), or the median of the other sources' (leave one family out)")
    ap.add_argument("--train-speed", type=float, nargs="+", metavar="X", help="(b) one stated training speed "
                    "for every pair, each X in turn: the median error a single value gives")
    args = ap.parse_args()
    for x in [] if args.verl else args.train_speed or []:
        errors = [abs(v["predicted"] / v["published_step"] - 1) * 100
                  for v in published(not args.no_roofline, x)]
        print(f"train-speed {x:g} for every pair: median absolute error {statistics.median(errors):.0f}% "
              f"(per pair: {', '.join(f'{e:.0f}%' for e in errors)})")
    if args.runs:
        body = []
        for run in args.runs:
            for v in own_run(run):
                iv = f"{v['alone_low']:.0f}–{v['alone_high']:.0f}" if v["alone_low"] else "–"
                body.append([v["run"], v["cell"], v["split"], f"{v['measured']:.0f}",
                             "–" if v["in_run"] is None else f"{v['in_run']:.0f}", f"{v['plan']:.0f}",
                             _pct(v["plan"], v["measured"]), f"{v['plan_alone']:.0f}", iv,
                             _pct(v["plan_alone"], v["measured"])])
        print(_md(["run", "cell", "split", "measured TPSPD", "in-run predicted", "plan (cell)", "error",
                   "plan (results.json alone)", "interval", "error"], body))
    if args.verl:
        body = [[v["cell"], v["row"], f"{v['tpspd']:.0f}", f"{v['measured']:.2f}×", f"{v['from_verl']:.2f}×",
                 "–" if v["verl_low"] is None else f"{v['verl_low']:.2f}–{v['verl_high']:.2f}×",
                 _pct(v["from_verl"], v["measured"]), f"{v['from_ours']:.2f}×", _pct(v["from_ours"], v["measured"])]
                for v in verl_pair(args.verl, (args.train_speed or [None])[0])]
        print(_md(["cell", "plan row", "TPSPD", "measured over VERL sync", "plan from VERL's log", "interval",
                   "error", "plan from rlbench's sync", "error"], body))
    if args.published:
        body = []
        rows_ = published(not args.no_roofline, args.source_speed)
        errors = []
        for v in rows_:
            err = 100 * (v["predicted"] / v["published_step"] - 1)
            errors.append(abs(err))
            inside = "yes" if v["low"] <= v["published_step"] <= v["high"] else "no"
            body.append([v["pair"], v["gpus"], v["split"], v["row"], f"{v['published_step']:.2f}×",
                         f"{v['published_total']:.2f}×", f"{v['predicted']:.2f}×",
                         " / ".join(f"{x:.2f}" for x in v["by_mean"]), f"{v['low']:.2f}–{v['high']:.2f}×",
                         f"{err:+.0f}%", inside] + ([f"{v['train_speed']:.2f}"] if args.source_speed else []))
        print(_md(["pair", "GPUs", "split", "plan row", "published per step", "published total time",
                   "predicted", "at mean 10/20/35% of cap", "interval", "error (per step)", "inside"]
                  + (["training speed stated"] if args.source_speed else []), body))
        print(f"\nmedian absolute error {statistics.median(errors):.0f}% ({min(errors):.0f}% to {max(errors):.0f}%)")


if __name__ == "__main__":
    main()
