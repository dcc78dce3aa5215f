"""VERL as a peer engine: `rlbench run --engine verl` and the VERL cells of `--ablation verl`.

command.py   RunConfig -> VERL's Hydra overrides (and the settings that make VERL run on CPU, each
             with its reason)
data.py      the iterations' prompts as VERL's GSM8K parquet
export.py    the initial policy as a Hugging Face directory and its tokenizer beside it
metrics.py   VERL's file logger (JSONL) -> rlbench's result schema
adapter.py   launch, watch and stop a VERL run; its results.json whatever happened
cpu/         rlbench's CPU layer, loaded inside VERL's processes through VERL's plugin hook
This package's own import is light: VERL's processes import it (for cpu/) in VERL's venv.
"""
