"""Shared-prompt attention micro-benchmark (scripts/micro.py --only packing,equivalence): one GRPO group (P
prompt tokens, G responses of R) through each layout, against the token ratio G(P+R)/(P+GR):

- step: forward + backward of the response log-probs (the trainer's update stage);
- forward: the log-probs under no_grad (its old-log-prob and reference stages);
- peak memory of a step (the first warm-up step of each layout): on CUDA the caching allocator's peak
  above what was allocated before it; on CPU the process's peak resident set during the step (VmHWM,
  reset before it) above its resident set before it, the last step's gradients freed and freed heap pages
  returned first (torch's CPU allocations are invisible to tracemalloc; MEMORY_METHOD);
- auto: engine.shared_prompt=auto's layout (core/costmodel/packing.py) and its reason.

Layouts are timed in turns (round r of every layout, then round r + 1), so a machine's drift hits all of
them alike; the medians and the fastest rounds are reported. --shapes runs named shapes (SHAPES); --layers and --vocab shrink every shape's model (the CPU
runs: a 2-core machine needs minutes per layer at these lengths, and a vocabulary of 150k makes lm_head,
the same work in every layout, outweigh a few layers).

    python scripts/micro.py --only packing --shapes 0.5b-p512,0.5b-p2048,7b-layer --device cuda --out m.json
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from micro_common import build, group

MODELS = Path(__file__).resolve().parents[1] / "configs" / "models"


@dataclass(frozen=True)
class Shape:
    model: str  # file under configs/models/
    P: int
    R: int
    G: int
    layers: int | None = None  # None: the model's own


SHAPES = {
    "0.5b-p512": Shape("qwen2.5-0.5b.json", 512, 128, 8),
    "0.5b-p2048": Shape("qwen2.5-0.5b.json", 2048, 256, 16),
    "7b-layer": Shape("qwen2.5-7b.json", 2048, 512, 16, layers=4),
    # The 7B layer at an eighth of the lengths, the same token ratio (4.0x), for CPUs: at full length one
    # layer's unpacked step needs ~18 GB in fp32 and ~60 TFLOP (minutes per step on 2 cores).
    "7b-layer-cpu": Shape("qwen2.5-7b.json", 256, 64, 16, layers=1),
    # High token ratios: many short responses sharing a long prompt (11x and 25.8x), where what does not
    # shrink with the tokens (attention over the prompt, narrow heads, fixed costs) decides the gain.
    "tiny-ratio11": Shape("tiny-shape.json", 512, 16, 16),
    "0.5b-ratio11": Shape("qwen2.5-0.5b.json", 1024, 32, 16),
    "0.5b-ratio26": Shape("qwen2.5-0.5b.json", 2048, 16, 32),
}
LAYOUTS = ("unpacked", "dense", "gather", "mask4d", "flex", "auto")


def add_arguments(ap) -> None:
    ap.add_argument("--shapes", default="", type=_shape_names, help=f"named shapes, comma-separated: "
                    f"{', '.join(SHAPES)} (default: the one shape of --model, --P, --R, --G)")
    ap.add_argument("--layers", type=int, help="decoder layers of every model, packing's and the sampler's (default: the shape's or the config's)")
    ap.add_argument("--vocab", type=int, help="vocabulary size of every shape's model (default: the model's)")
    ap.add_argument("--layouts", default=",".join(LAYOUTS),
                    help="layouts to time, comma-separated (flex runs on CUDA only)")


def _shape_names(value: str) -> str:
    """--shapes: known names only (argparse exits 2 with this message otherwise)."""
    import argparse

    unknown = [s for s in value.split(",") if s and s not in SHAPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; choices: {', '.join(SHAPES)}")
    return value


def shapes_of(a) -> list[tuple[str, Shape]]:
    if not a.shapes:
        return [("custom", Shape(str(a.model), a.P, a.R, a.G))]
    return [(s, SHAPES[s]) for s in a.shapes.split(",")]


def run(a, device, dtype, shapes: list[tuple[str, Shape]]) -> list[dict]:
    """These shapes (shapes_of(a)) -> one packing_bench result each."""
    out = []
    for name, s in shapes:
        model_json = Path(s.model) if Path(s.model).is_file() else MODELS / s.model
        res = packing_bench(model_json, device, dtype, s.P, s.R, s.G, a.rounds, a.warmup,
                            layers=a.layers or s.layers, vocab=a.vocab, names=a.layouts.split(","))
        out.append({"shape": name, **res})
    return out


def layouts(device, model=None, names=LAYOUTS) -> dict:
    """name -> log-prob function; auto needs the model (it weighs the model's shape on its device)."""
    from rlbench.engines.trainer import packing
    from rlbench.engines.trainer.logprob_plans import make_logprob_fn
    from rlbench.engines.trainer.packing_dense import packed_logprobs_dense

    out = {"unpacked": packing.unpacked_logprobs, "dense": packed_logprobs_dense, "gather": packing.packed_logprobs,
           "mask4d": packing.packed_logprobs_mask4d}
    if device.type == "cuda":  # FlexAttention has a backward on CUDA only
        out["flex"] = packing.packed_logprobs_flex
    if model is not None:
        out["auto"] = make_logprob_fn("auto", "dense", model)
    return {k: v for k, v in out.items() if k in names}


def packing_bench(model_json: Path, device, dtype, P: int, R: int, G: int, rounds: int, warmup: int,
                  layers: int | None = None, vocab: int | None = None, names=LAYOUTS) -> dict:
    """Step and forward seconds per layout (medians), speedups over unpacked, peak step memory (of the
    first warm-up step), auto's choice."""
    from rlbench.engines.trainer.packing import theoretical_speedup

    model = build(model_json, dtype, device, num_hidden_layers=layers, vocab_size=vocab).train()
    prompt, responses = group(model.config.vocab_size, P, R, G)
    fns = layouts(device, model, names)
    result = {"model": str(model_json), "layers": model.config.num_hidden_layers, "vocab": model.config.vocab_size,
              "P": P, "R": R, "G": G, "dtype": str(dtype).removeprefix("torch."),
              "token_ratio": theoretical_speedup(P, R, G), "theoretical": theoretical_speedup(P, R, G),
              "errors": {}, "peak_memory": {}, "memory_method": MEMORY_METHOD[device.type == "cuda"]}
    if "auto" in fns:
        result["auto"] = fns["auto"].choose(prompt, responses).as_dict()
    steps = {k: _step(model, fn, prompt, responses) for k, fn in fns.items()}
    times = _interleaved(steps, device, rounds, max(warmup, 1), result["errors"],
                         first=lambda name, fn: result["peak_memory"].update({name: _peak(fn, device, model)}))
    forwards = {k: _forward(model, fns[k], prompt, responses) for k in times}
    forward_times = _interleaved(forwards, device, rounds, warmup, result["errors"])
    # medians, and the fastest round (the robust figure on a shared, noisy host), with their speedups
    for key, ts in (("seconds", times), ("forward_seconds", forward_times)):
        for prefix, stat in (("", statistics.median), ("min_", min)):
            result[prefix + key] = {k: stat(v) for k, v in ts.items()}
            base = result[prefix + key].get("unpacked")
            result[prefix + key.replace("seconds", "speedup")] = {
                k: base / v for k, v in result[prefix + key].items() if base and k != "unpacked"}
    return result


def _step(model, fn, prompt, responses):
    def run():
        model.zero_grad(set_to_none=True)
        torch.stack([lp.sum() for lp in fn(model, prompt, responses)]).sum().backward()
    return run


def _forward(model, fn, prompt, responses):
    def run():
        with torch.no_grad():
            fn(model, prompt, responses)
    return run


def _interleaved(fns: dict, device, rounds: int, warmup: int, errors: dict, first=None) -> dict:
    """name -> seconds of each of `rounds` turns (each turn runs every fn once), after `warmup` calls each,
    the first of them through first(name, fn) when given; a fn that fails is dropped with its error."""
    from rlbench.core.devices.device import synchronize

    live = {}
    for name, fn in fns.items():
        try:
            for i in range(warmup):
                first(name, fn) if first is not None and i == 0 else fn()
            live[name] = fn
        except Exception as e:  # noqa: BLE001 - one layout failing must not hide the others' numbers
            errors[name] = f"{type(e).__name__}: {str(e)[:300]}"
    times: dict[str, list[float]] = {name: [] for name in live}
    for _ in range(rounds):
        for name, fn in live.items():
            synchronize(device)
            t = time.perf_counter()
            fn()
            synchronize(device)
            times[name].append(time.perf_counter() - t)
    return times


MEMORY_METHOD = {
    True: "CUDA caching allocator: max_memory_allocated during the step minus memory_allocated before it",
    False: "peak RSS (/proc/self/status VmHWM, reset through /proc/self/clear_refs) during the step minus the "
           "RSS before it, after freeing the gradients and returning freed heap pages (malloc_trim)"}


def _peak(step, device, model) -> int | None:
    """Bytes a step needs above what was in use before it (its gradients included: each step frees the
    last step's first); None where the platform cannot say (CPU off Linux/glibc)."""
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    try:
        _release_heap()
        Path("/proc/self/clear_refs").write_text("5")  # the process's peak so far is forgotten
        before = _status_kib("VmRSS")
    except OSError:
        step()
        return None
    step()
    return (_status_kib("VmHWM") - before) * 1024


def _release_heap() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them), so the RSS before a step is what the process
    holds and the step's growth shows in its peak."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS: now, VmHWM: its peak), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def equivalence(model_json: Path, device, dtype, P: int, R: int, G: int, layers: int | None = None,
                vocab: int | None = None) -> dict:
    """Max |packed - unpacked| of the log-probs and relative gradient difference, per packed layout.

    Responses of unequal length (R, R-1, ..., at least 1) so padding is exercised."""
    model = build(model_json, dtype, device, num_hidden_layers=layers, vocab_size=vocab).train()
    prompt, responses = group(model.config.vocab_size, P, R, G, seed=1)
    responses = [r[: max(1, R - i)] for i, r in enumerate(responses)]

    def run(fn):
        model.zero_grad(set_to_none=True)
        lps = fn(model, prompt, responses)
        torch.stack([lp.sum() for lp in lps]).sum().backward()
        grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        return torch.cat([lp.detach().float() for lp in lps]), grads

    fns = layouts(device, model)
    ref_lp, ref_g = run(fns.pop("unpacked"))
    out = {}
    for name, fn in fns.items():
        try:
            lp, g = run(fn)
            out[name] = {"max_abs_logprob": (lp - ref_lp).abs().max().item(),
                         "rel_grad": ((g - ref_g).norm() / ref_g.norm()).item()}
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


def markdown(result: dict) -> str:
    """One shape's result (micro.json's `packing` entry) as the table docs/results/shared-prompt.md shows."""
    r, mib = result, lambda b: "–" if b is None else f"{b / 2**20:,.0f}"  # noqa: E731
    lines = [f"{r['shape']}: {r['model'].rsplit('/', 1)[-1]}, {r['layers']} layer(s), vocabulary {r['vocab']:,}, "
             f"P={r['P']} R={r['R']} G={r['G']}, {r['dtype']}; token ratio {r['token_ratio']:.2f}x", "",
             "| layout | step s | step speedup (fastest round) | of the token ratio | forward s | forward speedup "
             "(fastest) | peak MiB |", "|---|---|---|---|---|---|---|"]
    for name, s in r["seconds"].items():
        up, fup = r["speedup"].get(name, 1.0), r["forward_speedup"].get(name, 1.0)
        best = lambda key: f" ({r[key][name]:.2f}x)" if name in r.get(key, {}) else ""  # noqa: E731
        fwd = r["forward_seconds"].get(name)
        share = "–" if name == "unpacked" else f"{up / r['token_ratio']:.0%}"
        lines.append(f"| {name} | {s:.3g} | {up:.2f}x{best('min_speedup')} | {share} | "
                     f"{'–' if fwd is None else f'{fwd:.3g}'} | {fup:.2f}x{best('min_forward_speedup')} | "
                     f"{mib(r['peak_memory'].get(name))} |")
    if r.get("auto"):
        lines += ["", f"auto: {'packed' if r['auto']['packed'] else 'unpacked'}; {r['auto']['reason']}"]
    if r.get("errors"):
        lines += [""] + [f"{k} failed: {v}" for k, v in r["errors"].items()]
    return "\n".join(lines)


def repredict(result: dict, peak: dict, host_waits: bool) -> dict:
    """auto's prediction for a recorded shape by the cost model as it is now, on a recorded peak (a run's
    env.json `peak`, or an entry of ~/.cache/rlbench/peak.json): what a change to the model does to the
    measured shapes, without measuring them again. The model is built on the meta device (no weights)."""
    from rlbench.core.costmodel import packing as cost
    from rlbench.core.results.utilisation import model_shape

    path = Path(result["model"])
    model = build(path if path.is_file() else MODELS / path.name, getattr(torch, result["dtype"]),
                  torch.device("meta"), layers=result["layers"], vocab_size=result["vocab"])
    shape = model_shape(model)
    attention = ((peak.get("attention") or {}).get(str(shape["head_dim"])) or {}).get("flops_per_s")
    try:
        dev = cost.Device.from_peak(peak, host_waits, attention)
    except TypeError:  # --tree of a commit before the attention probe
        dev = cost.Device.from_peak(peak, host_waits)
    c = cost.choose(shape, dev, "dense", result["P"], [result["R"]] * result["G"])
    measured = result["speedup"]["dense"] if c.packed else 1.0  # the layout it chooses now, as measured
    return {"shape": result["shape"], "P": result["P"], "R": result["R"], "G": result["G"],
            "token_ratio": result["token_ratio"], "dense": result["speedup"].get("dense"),
            "recorded": (result.get("auto") or {}).get("predicted_speedup"), "predicted": c.predicted_speedup,
            "packed": c.packed, "measured": measured, "attention_probe": attention is not None}


if __name__ == "__main__":
    # python scripts/micro_packing.py micro.json ...: the tables of their packing results;
    # ... --peak env.json [--accelerator] [--tree DIR]: auto's prediction now (or by another commit's model)
    # against the measured speedups (repredict)
    import argparse
    import json

    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--peak", help="a run's env.json (its `peak`) or a peak JSON: repredict on it")
    ap.add_argument("--accelerator", action="store_true", help="the peak is a GPU's (the host queues kernels)")
    ap.add_argument("--threads", type=int, default=2, help="a peak cache's entry: these intra-op threads")
    ap.add_argument("--tree", type=Path, help="repredict with the cost model of this source tree (another commit)")
    a = ap.parse_args()
    if a.tree:
        from micro_common import use_tree
        use_tree(a.tree)
    if a.peak:
        recorded = json.loads(Path(a.peak).read_text())

        def peak_of(result: dict) -> dict:
            """env.json's `peak`, a peak itself, or the entry of a peak cache (~/.cache/rlbench/peak.json)
            for --threads and the result's dtype."""
            if "peak" in recorded or "matmul_flops_per_s" in recorded:
                return recorded.get("peak", recorded)
            tag = f"|threads={a.threads}|torch.{result['dtype']}|"
            found = [v for k, v in recorded.items() if tag in k]
            if not found:
                raise SystemExit(f"{a.peak}: no entry with {tag} (entries: {', '.join(recorded)})")
            return found[0]
        print("| shape | P, R, G | token ratio | dense measured | auto: recorded prediction | auto now | "
              "measured (that layout) | error now |\n|---|---|---|---|---|---|---|---|")
    for path in a.files:
        for shape in json.loads(Path(path).read_text()).get("packing", []):
            if not a.peak:
                print(markdown(shape), end="\n\n")
                continue
            r = repredict(shape, peak_of(shape), host_waits=not a.accelerator)
            rec = "–" if r["recorded"] is None else f"{r['recorded']:.2f}x"
            print(f"| {r['shape']} | {r['P']}, {r['R']}, {r['G']} | {r['token_ratio']:.2f}x | {r['dense']:.2f}x | {rec} "
                  f"| {r['predicted']:.2f}x ({'packed' if r['packed'] else 'unpacked'}) | {r['measured']:.2f}x | "
                  f"{r['predicted'] / r['measured'] - 1:+.0%} |")
