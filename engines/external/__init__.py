"""External baselines: drive the real peer frameworks and read their metrics into rlbench's schema.

verl.run_verl(cfg, out_dir)            `rlbench run --engine verl` (GPU, VERL installed)
mindspeed.run_mindspeed(cfg, out_dir)  `rlbench run --engine mindspeed-rl` (Ascend NPU, MINDSPEED_RL_HOME)
Both raise rlbench.core.errors.UserError when the framework is absent, and write out_dir/results.json in
the same layout as an rlbench cell. Heavy imports happen inside the functions that need them.
"""
