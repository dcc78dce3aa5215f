"""What both sides of a VERL run agree on: rlbench's launch (command.py, adapter.py) sets these
environment variables, rlbench's code inside VERL's processes (cpu/, probe.py) reads them, and both
tell a training step's logged metrics from the rest the same way. Importing this costs nothing."""

PLUGIN = "rlbench.engines.external.verl.cpu"  # the CPU layer, named in VERL_USE_EXTERNAL_MODULES
CORES_ENV = "RLBENCH_VERL_CORES"  # the run's cores in device order ("0,1")
# "<model dir>=<tokenizer dir>": rlbench's export (export.py)
TOKENIZER_ENV = "RLBENCH_VERL_TOKENIZER"
# patches left out, by name (the tests show VERL failing without each)
SKIP_ENV = "RLBENCH_VERL_CPU_SKIP"
# a folder holding the FIFOs `request` and `reply`: the cell's turns (probe.py)
GATE_ENV = "RLBENCH_VERL_GATE"
CONFIG_ENV = "RLBENCH_VERL_CONFIG"  # where VERL's resolved config is written (probe.py)
# the training steps of the run: after the last, the cell leaves its turns
STEPS_ENV = "RLBENCH_VERL_STEPS"
# planted faults for the tests: skip_weight_sync[_after:N] (vLLM keeps old weights)
PLANT_ENV = "RLBENCH_VERL_PLANT"
# rlbench inside VERL on any device, in VERL_USE_EXTERNAL_MODULES
PROBE = "rlbench.engines.external.verl.probe"


def is_training_step(data: dict) -> bool:
    """Whether a dict VERL logged is a training step's (its token count and its time), not a
    validation's or a recipe's rollouter statistics."""
    return "perf/total_num_tokens" in data and ("timing_s/step" in data or "perf/time_per_step"
                                                in data)
