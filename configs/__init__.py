"""The configs that ship with rlbench (installed as the package data of rlbench.configs): run configs as
YAML overrides of the defaults in core/config.py, and model shapes under models/. `rlbench config
--list` names them; `rlbench run --config NAME` finds one by name."""
