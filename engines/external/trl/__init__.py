"""Hugging Face TRL's GRPOTrainer as a peer engine beside rlbench's, on the same cores and workload.

adapter.run_trl(cfg, out_dir)   `rlbench run --engine trl`, and the TRL cells of `--ablation peers`
settings.py   RunConfig -> GRPOConfig, the refusals, and every setting that stays different (and
              why)
export.py     the initial policy (and the tiny model's character tokenizer) as a Hugging Face
              directory
data.py       the iterations' prompts as rows; rlbench's strict GSM8K rule as TRL's reward function
worker.py     one rank (a pinned process, gloo through accelerate); launch.py starts and stops them
timing.py     TRL's steps timed under rlbench's stage names; gate.py: rank 0's turns through the
              cell
files.py      what each rank writes; results.py, record.py: those files -> rlbench's result schema
"""
