"""Built-in sampler vs vLLM on the same model, batch, lengths and sampling, on one pinned CPU core.

    .venv-vllm/bin/python scripts/rollout_compare.py [--config configs/cpu-default.yaml] [--set key=value ...]

Both backends get the config's model (its weights do not change the throughput: lengths are drawn),
the same prompts, G, temperature, top_p and seeds, and response lengths drawn from
rollout.response_length (default here: lognormal, mean 48, sigma 1, at most 512 tokens, EOS ignored),
so they generate exactly the same number of tokens. Per backend: one warm-up call, then --repeats
measured calls; reported are the medians of tokens/s, seconds to the first finished group and to the
last. The last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

DEFAULTS = ["rollout.response_length=lognormal", "rollout.response_length_mean=48",
            "rollout.response_length_sigma=1.0", "rollout.max_new_tokens=512"]


def measure(backend, inp, repeats: int) -> dict:
    """Median tok/s, first-group and last-group seconds over `repeats` calls (after one warm-up)."""
    runs = []
    for i in range(repeats + 1):
        first = []
        t0 = time.perf_counter()
        groups = backend.generate(inp.requests, inp.sampling,
                                  on_group=lambda g: first or first.append(time.perf_counter() - t0))
        wall = time.perf_counter() - t0
        tokens = sum(len(r) for g in groups for r in g.responses)
        if i:  # the first call warms up (vLLM's first call is several times slower)
            runs.append({"tok_s": tokens / wall, "first_group_s": first[0], "last_group_s": wall,
                         "tokens": tokens})
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None, help="run config (default: the CPU default)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override key=value")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch

    from rlbench.core.config_files import load_config
    from rlbench.core.devices import device as dev
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import iteration_input
    from rlbench.engines.model.loader import load_policy
    from rlbench.engines.rollout.worker import backend_spec, build_backend

    cfg = load_config(args.config, DEFAULTS + args.sets)
    dev.pin("cpu", 0, 1)  # one device, as a rollout worker holds it
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, _ = load_policy(cfg, dataset)
    inp = iteration_input(cfg, dataset, tok, 0)
    state = {n: p.detach() for n, p in policy.named_parameters()}
    out = {"sequences": len(inp.requests) * cfg.rollout.group_size, "max_num_seqs": cfg.rollout.max_num_seqs}
    for name in ("builtin", "vllm"):
        spec = {**backend_spec(cfg), "backend": name}
        t = time.perf_counter()
        backend = build_backend(spec, policy.config, tok.eos_token_id, cfg.rollout.max_num_seqs,
                                torch.device("cpu"), lambda: type(policy)(policy.config).eval(), state)
        backend.load_weights(state, 0)
        start_s = time.perf_counter() - t
        out[name] = {**measure(backend, inp, args.repeats), "start_s": start_s}
        getattr(backend, "close", lambda: None)()
    for name in ("builtin", "vllm"):
        r = out[name]
        print(f"{name:8s} {r['tok_s']:9.0f} tok/s  first group {r['first_group_s']:6.2f} s  last {r['last_group_s']:6.2f} s"
              f"  ({r['tokens']:.0f} tokens; start-up {r['start_s']:.1f} s)")
    print(json.dumps(out))


if __name__ == "__main__":  # vLLM's engine may spawn processes: they import this file
    main()
