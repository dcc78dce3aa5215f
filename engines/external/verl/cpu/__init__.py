"""rlbench's CPU layer for VERL: VERL 0.9.1's GRPO trainer and recipes on CPU cores (FSDP over gloo,
rollout through vLLM's CPU build), with no edit of VERL's files.

VERL imports the modules named in VERL_USE_EXTERNAL_MODULES at `import verl`, in every process it
starts (its own plugin hook: verl/__init__.py:49); rlbench's CPU launch names this package there
(engines/external/verl/command.py). Importing it registers and selects the CPU platform
(platform.py) and sets the patches of patches.py to apply as their modules are imported. It imports
nothing heavy itself: VERL's driver imports it too. The VERL and vLLM releases these answers were
read in and tested with are engines/external/verl/venv.py's CHECKED.
"""
from __future__ import annotations

from verl.plugin.platform import set_platform

from rlbench.engines.external.verl import hooks
from rlbench.engines.external.verl.cpu import patches, platform

set_platform(platform.PlatformCPU())
platform.pin()  # an actor holding a device: its core, from the first line of VERL's own code
for _patch in patches.active():
    if _patch.module:
        hooks.after_import({_patch.module: [_patch.apply]})
    else:
        _patch.apply()
