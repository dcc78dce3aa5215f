"""Colours: one per Stage (the same in every plot) and one per cell (the same in every plot)."""
from __future__ import annotations

import zlib

from rlbench.core.record.stages import Stage

STAGE_COLORS = {
    Stage.ROLLOUT.value: "#4C72B0",
    Stage.REWARD.value: "#DD8452",
    Stage.OLD_LOGPROB.value: "#55A868",
    Stage.REF_LOGPROB.value: "#8172B3",
    Stage.ADVANTAGE.value: "#937860",
    Stage.UPDATE.value: "#C44E52",
    Stage.OPTIMIZER_STEP.value: "#DA8BC3",
    Stage.WEIGHT_SYNC.value: "#64B5CD",
    # the weights' bytes crossing the link: a darker sync blue
    Stage.WEIGHT_TRANSFER.value: "#2F4B7C",
    Stage.GROUP_TRANSFER.value: "#FFA600",
    Stage.QUEUE_WAIT.value: "#D9D9D9",  # idle: pale, and hatched in the timeline
    Stage.HANDOFF.value: "#8C8C8C",
    Stage.EVAL.value: "#CCB974",
    Stage.PAUSED.value: "#F0F0F0",  # held between iterations: in no window
}
_EXTRA = ["#2F4B7C", "#A05195", "#F95D6A", "#665191", "#FFA600", "#003F5C"]
CELL_COLORS = ["#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2",
               "#7F7F7F", "#BCBD22", "#17BECF"]


def stage_color(stage: str) -> str:
    """Fixed colour of a stage; a stage outside the enum gets a stable colour from its name."""
    return STAGE_COLORS.get(stage) or _EXTRA[zlib.crc32(stage.encode()) % len(_EXTRA)]


def cell_color(index: int) -> str:
    return CELL_COLORS[index % len(CELL_COLORS)]
