"""--seeds side by side (bench/seed_pool.py): cells of different seeds at once only on disjoint cores."""
from rlbench.config import RunConfig, with_overrides
from rlbench.seed_pool import core_slots, parallel_plan


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
