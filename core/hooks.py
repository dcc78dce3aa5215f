"""Hook points the measured code offers the test hooks (planted slowdowns and faults,
bench/planted/).

The timer, the sampler, the trainer and the worker hosts call a point; whatever is registered for it
runs. They never import the test hooks: in a process whose environment names one
(RLBENCH_SLOW_STAGES, RLBENCH_FAULT, set for a test or a calibration run), the first call of any
point imports the test hooks by name and lets them register; otherwise nothing is registered and a
call is one dict lookup.

Points and their arguments:
    stage_end    (stage, wall_s, cpu_s, idle)  the timer, at the end of every stage, inside it
    decode_step  (cpu_s,)                      the built-in sampler, after every decode step
    iteration    (k, role)                     a worker about to do iteration k's work (role:
                                               rollout,
                                               trainer, vllm_engine)
    started      (worker,)                     a worker process, after it was pinned to its device
    node         (resources, clock)            a Ray actor, on starting: its node's custom resources
                                               and
                                               its clock (core/record/stages.py NODE_CLOCK)
"""
from __future__ import annotations

import os

from rlbench.core.by_name import resolve

POINTS = ("stage_end", "decode_step", "iteration", "started", "node")
ENVIRONMENT = ("RLBENCH_SLOW_STAGES", "RLBENCH_FAULT")  # a test hook is wanted in this process
# install(register)
TEST_HOOKS = "rlbench.planted:install"  # by name: the measured code never imports the test hooks

_registered: dict[str, list] = {}
_installed = False


def register(point: str, fn) -> None:
    if point not in POINTS:
        raise ValueError(f"unknown hook point {point!r}; points: {', '.join(POINTS)}")
    _registered.setdefault(point, []).append(fn)


def call(point: str, *args) -> None:
    if not _installed:
        install()
    for fn in _registered.get(point, ()):
        fn(*args)


def install() -> None:
    """Register the test hooks when this process's environment asks for one (once per process; again
    after reset(), when a test or `slowdown.activate` has changed the environment)."""
    global _installed
    _installed = True
    if any(os.environ.get(name) for name in ENVIRONMENT):
        resolve(TEST_HOOKS)(register)


def reset() -> None:
    """Forget every registration; the next call installs again from the environment."""
    global _installed
    _registered.clear()
    _installed = False
