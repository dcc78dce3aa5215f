"""The names both sides of a VERL run agree on: rlbench's launch (command.py, adapter.py) sets these environment
variables, and rlbench's code inside VERL's processes (cpu/) reads them. Importing this costs nothing."""

PLUGIN = "rlbench.engines.external.verl.cpu"  # the CPU layer, named in VERL_USE_EXTERNAL_MODULES
CORES_ENV = "RLBENCH_VERL_CORES"  # the run's cores in device order ("0,1")
TOKENIZER_ENV = "RLBENCH_VERL_TOKENIZER"  # "<model dir>=<tokenizer dir>": rlbench's export (export.py)
SKIP_ENV = "RLBENCH_VERL_CPU_SKIP"  # patches left out, by name (the tests show VERL failing without each)
