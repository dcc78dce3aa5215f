"""Micro-benchmark: one trainer step on a GRPO group, unpacked vs shared-prompt packed.

A step is forward + backward of the sum of the response log-probs, the work the
trainer does per group. Group: P=512 prompt tokens, G=8 responses of R=128;
token ratio G*(P+R)/(P+G*R) = 3.33x is the speedup if cost were linear in tokens.

    .venv/bin/pytest tests/benchmarks/bench_packing.py --benchmark-only -p no:cacheprovider

Not collected by a plain `pytest` run (python_files is test_*.py). Each case warms
up once, then times ROUNDS steps; the summary lines printed at the end give the
speedup per thread count on the median (and on the min, the robust figure on a
shared, noisy host), the last line as JSON.
"""
from __future__ import annotations

import json

import pytest
import torch
import transformers

from rlbench.engines.trainer.packing import (
    group_token_counts,
    packed_logprobs,
    packed_logprobs_mask4d,
    theoretical_speedup,
    unpacked_logprobs,
)
from rlbench.engines.trainer.packing_dense import packed_logprobs_dense

P, R, G = 512, 128, 8
ROUNDS = 7
LAYOUTS = {"unpacked": unpacked_logprobs, "dense": packed_logprobs_dense, "gather": packed_logprobs,
           "mask4d": packed_logprobs_mask4d}
THREADS = [1, 2]


@pytest.fixture(scope="module")
def model():
    # hidden 128, 2 layers, 4 heads (2 KV heads: GQA as in Qwen2.5), vocab 100, fp32, no dropout
    config = transformers.Qwen2Config(vocab_size=100, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                      attention_dropout=0.0, attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).float().eval()


@pytest.fixture(scope="module")
def group():
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 100, (P,), generator=g).tolist()
    return prompt, [torch.randint(0, 100, (R,), generator=g).tolist() for _ in range(G)]


@pytest.fixture(scope="module")
def timings(request):
    """Collects {(threads, layout): (median, min) seconds}; prints the speedups when the module is done."""
    out: dict[tuple[int, str], tuple[float, float]] = {}
    yield out
    rows = []
    for threads in THREADS:
        for layout in ("dense", "gather", "mask4d"):
            if (threads, "unpacked") in out and (threads, layout) in out:
                (base_med, base_min), (med, mn) = out[(threads, "unpacked")], out[(threads, layout)]
                rows.append({"threads": threads, "layout": layout,
                             "speedup_median": round(base_med / med, 3), "speedup_min": round(base_min / mn, 3)})
    lines = [f"packing train step, threads={r['threads']}: {r['layout']} is {r['speedup_median']:.2f}x "
             f"(median; {r['speedup_min']:.2f}x on min) faster than unpacked; token ratio "
             f"{theoretical_speedup(P, R, G):.2f}x" for r in rows]
    lines.append(json.dumps({"bench": "packing_train_step", "P": P, "R": R, "G": G,
                             "theoretical": round(theoretical_speedup(P, R, G), 3), "results": rows}))
    # Module teardown runs under output capture: suspend it so the summary reaches the terminal.
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if rows and reporter is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            for line in lines:
                reporter.write_line(line)


@pytest.mark.benchmark
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_train_step(benchmark, model, group, timings, layout, threads):
    prompt, responses = group
    logprobs = LAYOUTS[layout]

    def step():
        model.zero_grad(set_to_none=True)
        sum(lp.sum() for lp in logprobs(model, prompt, responses)).backward()

    unpacked_tokens, packed_tokens = group_token_counts(P, [R] * G)
    benchmark.group = f"packing train step, threads={threads}"
    benchmark.extra_info.update(P=P, R=R, G=G, threads=threads, unpacked_tokens=unpacked_tokens,
                                packed_tokens=packed_tokens, theoretical_speedup=theoretical_speedup(P, R, G))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        benchmark.pedantic(step, rounds=ROUNDS, warmup_rounds=1, iterations=1)
    finally:
        torch.set_num_threads(previous)
    if benchmark.stats is not None:  # None under --benchmark-disable
        timings[(threads, layout)] = (benchmark.stats.stats.median, benchmark.stats.stats.min)
