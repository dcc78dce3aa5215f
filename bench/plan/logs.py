"""What every log reader returns (`rlbench plan`): the synchronous steps a log holds, which were used and
which keys were read, and the one error a log that cannot be read raises (exit 2, naming file, line, key)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlbench.core.config import RunSection
from rlbench.core.costmodel.fromlog import LoggedStep
from rlbench.core.errors import UserError

WARMUP = RunSection.model_fields["warmup_iterations"].default  # the steps rlbench drops from its own runs


@dataclass
class StepLog:
    """A log's synchronous steps. devices: the GPUs the log says it ran on (None: it does not say);
    keys: the keys read, as the log names them; notes: what the reader had to assume or skip."""
    format: str
    path: Path
    steps: list[LoggedStep]
    keys: list[str]
    devices: int | None = None
    warmup: int = WARMUP
    notes: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # format-specific facts (e.g. the log's own TPSPD key)

    @property
    def used(self) -> list[LoggedStep]:
        """The steps after warm-up (all of them where the log is no longer than the warm-up)."""
        return self.steps[self.warmup:] if len(self.steps) > self.warmup else self.steps

    @property
    def dropped(self) -> list[int]:
        return [s.step for s in self.steps[:self.warmup]] if len(self.steps) > self.warmup else []


def missing(path: Path, line: int | None, key: str, what: str, allowed: str = "") -> UserError:
    """The error of a log that lacks a key the plan needs: file, line, key and what would do instead."""
    where = f"{path}:{line}" if line else str(path)
    tail = f" ({allowed})" if allowed else ""
    return UserError(f"{where}: {what} has no {key!r}{tail}")


def number(v, path: Path, line: int | None, key: str) -> float:
    """A logged value as a float; a value that is not a number is an error naming it."""
    try:
        return float(v)
    except (TypeError, ValueError):
        raise UserError(f"{path}:{line}: {key!r} is {v!r}, not a number") from None
