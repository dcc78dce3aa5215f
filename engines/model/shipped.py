"""The CPU default's warm-started tiny model, built once and shipped in the package (warmstart/), so
that a first `rlbench run` starts training at once instead of spending its first minutes (500
supervised steps: 1.5-3.5 minutes on 2 cores) on the warm start.

The shipped weights serve a run whose config shapes the warm start exactly as the default config
does (the model and data sections, the seed) and whose warm-start code is the code that built them
(tiny.shipped_for): their key is the cache's (tiny.cache_key) without the library versions, which
the cache keys on because a cached warm start is a by-product of this machine's libraries, while the
shipped one is a published artefact, valid with any library that loads it. Where the key differs the
run warm-starts as before.

Built reproducibly: `python -m rlbench.engines.model.shipped build` trains in a fresh interpreter
with torch's and MKL's AVX2 kernels (KERNELS), whatever the CPU has beyond them: torch's AVX-512
kernels give other bits than its AVX2 ones (they sum in another order: measured on an AMD EPYC,
where one thread and two gave the same bits), so the build names kernels every x86-64 CPU of the
project's kind has. Whether another CPU model gives the same bits with them has not been measured.
tests/unit/engines/test_shipped_warmstart.py checks that the shipped key is the default config's (a
change to the warm-start code or the default config fails it until the weights are rebuilt) and, in
the `slow` tier, rebuilds them and compares tensor by tensor, bit for bit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from rlbench.core.config_files import load_config
from rlbench.engines.data.source import load_dataset
from rlbench.engines.data.task import format_prompt
from rlbench.engines.model.tiny import (SHIPPED, THREADS, build_tiny, cache_key, quiet_transformers,
                                        warm_start)
from rlbench.engines.model.tokenizer import CharTokenizer

# read when torch loads: a fresh interpreter
KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}


def build(out: Path = SHIPPED, timeout_s: float = 1800) -> None:
    """Warm-start the default config's tiny model into `out` (a Hugging Face folder and
    warmstart.json), in a fresh interpreter with KERNELS; raises RuntimeError with its output's tail
    where it fails."""
    env = {**os.environ, **KERNELS, "OMP_NUM_THREADS": str(THREADS)}
    proc = subprocess.run([sys.executable, "-m", "rlbench.engines.model.shipped", "_train",
                           str(out)],
                          env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"building the shipped warm start failed:\n{proc.stderr[-3000:]}")


def _train(out: Path) -> None:
    """The build's own process: the warm start of `rlbench run`'s default config, saved to out."""
    quiet_transformers()
    cfg = load_config(None, [])
    m = cfg.model
    tok = CharTokenizer()
    model = build_tiny(m, tok.vocab_size, cfg.run.seed)
    losses = warm_start(model, tok, load_dataset(cfg.data, cfg.run.seed).train, format_prompt,
                        m.warmstart_steps, m.warmstart_lr, m.warmstart_batch, cfg.run.seed,
                        m.warmstart_gsm8k_share, None, m.warmstart_direct_share)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    info = {"key": cache_key(cfg, libraries=False), "steps": m.warmstart_steps,
            "final_loss": losses[-1],
            "kernels": KERNELS, "threads": THREADS, "torch": torch.__version__.split("+")[0]}
    (out / "warmstart.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["_train"]:
        _train(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["build"]:
        build(Path(sys.argv[2]) if len(sys.argv) > 2 else SHIPPED)
    else:
        sys.exit("usage: python -m rlbench.engines.model.shipped build [FOLDER]")
