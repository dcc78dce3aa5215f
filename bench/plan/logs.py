"""What every log reader returns (`rlbench plan`): the synchronous steps a log holds, which were
used and which keys were read, and the one error a log that cannot be read raises (exit 2, naming
file, line, key)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from rlbench.core.config import RunSection
from rlbench.core.costmodel.fromlog import LoggedStep
from rlbench.core.errors import UserError

# the steps rlbench drops from its own runs
WARMUP = RunSection.model_fields["warmup_iterations"].default


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
    # format-specific facts (e.g. the log's own TPSPD key)
    extra: dict = field(default_factory=dict)
    # what to give where the log does not say how many devices it ran on (the format's own words)
    no_devices: str = ("the log does not say how many GPUs the run used (no 'perf/throughput'): "
                       "give --gpus N")

    @property
    def used(self) -> list[LoggedStep]:
        """The steps after warm-up (all of them where the log is no longer than the warm-up)."""
        return self.steps[self.warmup:] if len(self.steps) > self.warmup else self.steps

    @property
    def dropped(self) -> list[int]:
        return [s.step for s in self.steps[:self.warmup]] if len(self.steps) > self.warmup else []


def where(path: Path, line: int | None, step: int | None = None) -> str:
    """'file:line', or 'file (step N)' for a log without lines (TensorBoard's event files)."""
    if line:
        return f"{path}:{line}"
    return f"{path} (step {step})" if step is not None else str(path)


def missing(path: Path, line: int | None, key: str, what: str, allowed: str = "") -> UserError:
    """The error of a log that lacks a key the plan needs: file, line, key and what would do
    instead."""
    tail = f" ({allowed})" if allowed else ""
    return UserError(f"{where(path, line)}: {what} has no {key!r}{tail}")


def number(v, path: Path, line: int | None, key: str, step: int | None = None) -> float:
    """A logged value as a float; a value that is not a number is an error naming it."""
    try:
        return float(v)
    except (TypeError, ValueError):
        raise UserError(f"{where(path, line, step)}: {key!r} is {v!r}, not a number") from None


POSITIVE, NON_NEGATIVE = "positive", "non-negative"
_ALLOWED = {POSITIVE: "a finite number > 0", NON_NEGATIVE: "a finite number >= 0"}


def checked(v, path: Path, line: int | None, key: str, rule: str = POSITIVE,
            step: int | None = None) -> float:
    """A logged value that the plan computes with: a number, finite, and > 0 (POSITIVE: times of a
    whole step, token counts, lengths) or >= 0 (NON_NEGATIVE: a stage's seconds); anything else
    (nan, inf, 0 where it divides, a negative time) is an error naming the file, the line, the step
    and the key, never a value that silently changes the plan."""
    x = number(v, path, line, key, step)
    if not math.isfinite(x) or x < 0 or (rule == POSITIVE and x == 0):
        at = f" at step {step}" if step is not None and line else ""
        raise UserError(f"{where(path, line, step)}: {key!r} is {x:g}{at}; allowed: "
                        f"{_ALLOWED[rule]}")
    return x


def skipped_note(places: list[str], what: str) -> list[str]:
    """The note of the lines (or steps) a reader left out, and why; none left out: no note."""
    if not places:
        return []
    shown = ", ".join(places[:5]) + (", ..." if len(places) > 5 else "")
    return [f"{len(places)} skipped {what}: {shown}"]
