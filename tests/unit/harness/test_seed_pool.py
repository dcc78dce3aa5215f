"""--seeds side by side (bench/run/seed_pool.py): cells of different seeds at once only on disjoint cores."""
import pytest

from rlbench.core.config import RunConfig

from rlbench.core.config_files import with_overrides
from rlbench.run.seed_pool import core_slots, parallel_plan


def cfg(**engine):
    return with_overrides(RunConfig(), {"engine": engine}) if engine else RunConfig()


def todo(seeds, c=None):
    c = c or cfg()
    return [({"name": f"sync@seed{s}", "exit_code": None}, (f"sync@seed{s}", c, s)) for s in seeds]


def test_two_cores_and_two_device_cells_stay_sequential():
    assert cfg().engine.num_devices == 2
    assert core_slots([cfg()], cores=[0, 1]) == []
    assert core_slots([cfg()], cores=[0, 1, 2]) == []


def test_slots_are_disjoint_and_sized_to_the_largest_cell():
    slots = core_slots([cfg(), cfg(rollout_devices=2)], cores=list(range(8)))
    assert slots == [[0, 1, 2], [3, 4, 5]]
    flat = [c for s in slots for c in s]
    assert len(flat) == len(set(flat))


def test_accelerators_and_single_seeds_stay_sequential():
    assert core_slots([cfg(device="cuda")], cores=list(range(16))) == []
    assert parallel_plan(todo([0])) == []
    assert parallel_plan(todo([None])) == []


@pytest.mark.e2e
def test_two_seeds_side_by_side_on_their_own_cores(two_seed_run):
    """One-core cells (share_devices) on a two-core mask (conftest.py's shared run): seeds 0 and 1 run at
    once, each pinned to a core the other does not use, and both complete as a sequential run's would."""
    import json

    from rlbench.core.results import schema

    run_dir, _, cores = two_seed_run
    if cores is None:
        pytest.skip("needs two cores")
    abl = json.loads((run_dir / schema.ABLATION).read_text())
    res = [json.loads((run_dir / c["dir"] / schema.RESULTS).read_text()) for c in abl["cells"]]
    assert [r["status"] for r in res] == ["complete", "complete"]
    # each cell placed one worker on the one core of its mask (placement names cores by index in the mask)
    assert all([p["device"] for p in r["placement"] if p["device"]] == ["cpu:0"] for r in res)
    masks = [set(c["cores"]) for c in abl["cells"]]
    assert masks[0] | masks[1] == set(cores) and not masks[0] & masks[1]  # one core each, not the same one
    (a0, w0), (a1, w1) = [(r["clock_t0"], r["wall_s_total"]) for r in res]
    assert a0 < a1 + w1 and a1 < a0 + w0  # they overlapped in time


def test_cells_take_turns_per_seed_and_lone_cells_do_not():
    """Interleaving is the default (run.interleave): an ablation's cells take turns, each seed's cells in a ring
    of their own; one cell per seed has nothing to take turns with, so its seeds reach the pool above."""
    from rlbench.run.ablation import takes_turns, turn_groups

    def cells(names, seeds, c=None):
        c = c or cfg()
        return [({"name": f"{n}@seed{s}"}, (f"{n}@seed{s}", c, s)) for s in seeds for n in names]

    lone = cells(["sync"], [0, 1])
    assert turn_groups(lone, False) == [[e] for e in lone] and not takes_turns(turn_groups(lone, False), False)
    pairs = cells(["sync", "periodic_async"], [0, 1])
    groups = turn_groups(pairs, False)
    assert [[e["name"] for e, _ in g] for g in groups] == [["sync@seed0", "periodic_async@seed0"],
                                                          ["sync@seed1", "periodic_async@seed1"]]
    assert takes_turns(groups, False)
    off = with_overrides(RunConfig(), {"run": {"interleave": False}})
    assert not takes_turns(turn_groups(cells(["sync", "periodic_async"], [0], off), False), False)
    assert takes_turns([lone[:1]], shared_ring=True)  # check --against: one ring with the other tree
