"""A named architecture's random initialisation, Hugging Face's against rlbench's (engines/model/random_init.py),
alternating in one process: seconds per round, and the cores the process may use.

    python scripts/init_bench.py --model configs/models/qwen2.5-0.5b.json --dtype bfloat16 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.initialization import no_init_weights

from rlbench.engines.model import random_init


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="configs/models/qwen2.5-0.5b.json", help="an architecture config JSON")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    values = {k: v for k, v in json.loads(open(a.model).read()).items() if not k.startswith("_")}
    cfg = AutoConfig.for_model(**values)
    dtype = getattr(torch, a.dtype)
    for r in range(a.rounds):
        t = time.perf_counter()
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        hf = time.perf_counter() - t
        del model
        t = time.perf_counter()
        with no_init_weights():
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        random_init.initialise(model, cfg.initializer_range, seed=0)
        ours = time.perf_counter() - t
        del model
        print(f"round {r + 1}: Hugging Face from_config {hf:.2f} s, built without init + drawn {ours:.2f} s "
              f"({len(os.sched_getaffinity(0))} cores)", flush=True)


if __name__ == "__main__":
    main()
