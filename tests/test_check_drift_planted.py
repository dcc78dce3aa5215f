"""The planted drift (docs/results/ci-gate.md, 'Drift over the history'): a history of 8 commits each making the
update stage 2% slower passes the per-step gate at every step, and is caught as a change point of cost:update
and by the A/B against the anchor; an unchanged history of the same length raises nothing.

Measured, not here: tests/fixtures/history/measured.jsonl holds the entries of real `rlbench check --against
HEAD` runs of configs/ci-ab.yaml (written by scripts/history_fixture.py; command, machine, load and date in
docs/results/ci-gate.md): unchanged A/B runs (nothing planted), runs with the update stage 2% slower in the
new tree (RLBENCH_SLOW=update:0.02: one step of the drift), and runs with it 16% slower (update:0.16: eight
such steps, what an A/B against the anchor sees).
Assembled here, without any A/B run (bench/check/drift_power.py): histories whose steps are those entries,
drawn with replacement under a seed and given commit names; an unchanged run's entry may enter inverted (new /
old and old / new are equally likely when both sides are the same commit). Every history is 8 unchanged steps,
then 8 more: 2% steps, or unchanged ones. The chaining, Otava's change points, the drift verdict and the anchor
A/B's confirmation run for real on them. The unchanged runs' entries are few, so drawn histories share them:
the seeds below are draws from one small set of measurements, not independent trials.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.check import drift, drift_power, history

MEASURED = Path(__file__).parent / "fixtures" / "history" / "measured.jsonl"
SEEDS = range(10)


def assemble(path: Path, seed: int, drifting: bool) -> list[dict]:
    """bench/check/drift_power.py's history (8 unchanged steps, 8 more, an A/B against the anchor) written to
    path; -> its entries."""
    entries = drift_power.assemble(drift_power.groups(MEASURED), seed, "update:0.02" if drifting else None,
                                   "update:0.16" if drifting else None)
    for e in entries:
        history.append(path, e)
    return history.read(path)


def test_the_measured_entries_are_real_runs_of_the_gate():
    runs = drift_power.groups(MEASURED)
    assert len(runs["unchanged"]) >= 3 and runs["update:0.02"] and runs["update:0.16"]
    assert all(e["workload"]["config"] == "configs/ci-ab.yaml" and e["machine"]["cpu_model"]
               for group in runs.values() for e in group)
    big = runs["update:0.16"][0]["metrics"]["cost:update"]
    assert big["mark"] == "worse" and big["low"] > 1.08  # the anchor A/B sees eight steps at once


@pytest.mark.parametrize("seed", SEEDS)
def test_eight_steps_of_two_percent_pass_each_step_and_are_caught_as_a_drift(tmp_path, seed):
    entries = assemble(tmp_path / "history.jsonl", seed, drifting=True)
    assert all(e["verdict"]["exit_code"] == 0 and e["metrics"]["cost:update"]["mark"] != "worse"
               for e in entries[8:16])  # every 2% step passed the per-step gate
    wl = entries[0]["workload"]
    res = drift.judge(entries[:-1], wl)  # before the anchor A/B: the change point alone
    assert "cost:update" in {cp.metric for cp, _ in res.failures}, drift.format_history(entries, "assembled")
    assert all(8 <= cp.position for cp, _ in res.failures if cp.metric == "cost:update")
    confirmed = drift.judge(entries, wl)  # the anchor A/B, +16% planted, confirms it
    said = [s for cp, s in confirmed.failures if cp.metric == "cost:update"]
    assert confirmed.exit_code == 1 and said and said[0].endswith("confirmed")


@pytest.mark.parametrize("seed", SEEDS)
def test_an_unchanged_history_of_the_same_length_raises_nothing(tmp_path, seed):
    entries = assemble(tmp_path / "history.jsonl", seed, drifting=False)
    wl = entries[0]["workload"]
    assert drift.judge(entries[:-1], wl).failures == [], drift.format_history(entries, "assembled")
    assert drift.judge(entries, wl).exit_code == 0
